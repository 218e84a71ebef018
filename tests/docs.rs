//! The documentation checked without a server or a network: every command of `commands/*.json`
//! has a page in `docs/commands/` and every page a command, each page says what the metadata
//! says (syntax, since, complexity, ACL categories, history), and every relative link and
//! `#anchor` in the Markdown files resolves.

#[allow(dead_code)] // the module's own helpers for creating commands are not used here
#[path = "../src/metadata.rs"]
mod metadata;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The Markdown files a reader follows links through: the front pages, docs/ and the client
/// packages' READMEs.
fn markdown_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = [
        "README.md",
        "ARCHITECTURE.md",
        "BENCHMARKS.md",
        "CHANGELOG.md",
    ]
    .iter()
    .map(|name| root().join(name))
    .collect();
    for client in ["rust", "python", "node"] {
        let readme = root().join("clients").join(client).join("README.md");
        if readme.exists() {
            files.push(readme);
        }
    }
    let mut folders = vec![root().join("docs")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder)
            .expect("docs/")
            .filter_map(Result::ok)
        {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|ext| ext == "md") {
                files.push(path);
            }
        }
    }
    files
}

/// A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as hyphens.
fn slug(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .flat_map(char::to_lowercase)
        .collect()
}

/// What one Markdown file holds for these checks.
#[derive(Default)]
struct Page {
    /// The anchors of its headings (GitHub numbers repeats: `-1`, `-2`) and `<a id>`s.
    anchors: BTreeSet<String>,
    /// The targets of its links and images.
    links: Vec<String>,
    /// Its fenced code blocks: (language, text).
    blocks: Vec<(String, String)>,
}

fn parse(markdown: &str) -> Page {
    let mut page = Page::default();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let (mut heading, mut block): (Option<String>, Option<(String, String)>) = (None, None);
    for event in Parser::new(markdown) {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::End(TagEnd::Heading(_)) => {
                let base = slug(&heading.take().unwrap_or_default());
                let count = seen.entry(base.clone()).or_insert(0);
                let anchor = match *count {
                    0 => base,
                    n => format!("{base}-{n}"),
                };
                *count += 1;
                page.anchors.insert(anchor);
            }
            Event::Start(Tag::CodeBlock(kind)) => {
                let language = match kind {
                    CodeBlockKind::Fenced(info) => {
                        info.split_whitespace().next().unwrap_or("").to_owned()
                    }
                    CodeBlockKind::Indented => String::new(),
                };
                block = Some((language, String::new()));
            }
            Event::End(TagEnd::CodeBlock) => page.blocks.extend(block.take()),
            Event::Text(text) | Event::Code(text) => {
                if let Some(heading) = &mut heading {
                    heading.push_str(&text);
                } else if let Some((_, code)) = &mut block {
                    code.push_str(&text);
                }
            }
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                page.links.push(dest_url.into_string());
            }
            Event::Html(html) | Event::InlineHtml(html) => {
                for attribute in ["id=\"", "name=\""] {
                    if let Some(rest) = html.split(attribute).nth(1) {
                        page.anchors
                            .extend(rest.split('"').next().map(str::to_owned));
                    }
                }
            }
            _ => {}
        }
    }
    page
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let pages: HashMap<PathBuf, Page> = markdown_files()
        .into_iter()
        .map(|path| {
            let page = parse(&read(&path));
            (path.canonicalize().expect("a Markdown file"), page)
        })
        .collect();
    let mut broken = Vec::new();
    for (path, page) in &pages {
        for link in &page.links {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = link.split_once('#').unwrap_or((link, ""));
            let target = if file.is_empty() {
                path.clone()
            } else {
                path.parent().expect("a folder").join(file)
            };
            let Ok(target) = target.canonicalize() else {
                broken.push(format!("{}: {link} (no such file)", path.display()));
                continue;
            };
            if anchor.is_empty() {
                continue;
            }
            let parsed;
            let anchors = match pages.get(&target) {
                Some(page) => &page.anchors,
                None if target.extension().is_some_and(|ext| ext == "md") => {
                    parsed = parse(&read(&target));
                    &parsed.anchors
                }
                None => continue,
            };
            if !anchors.contains(anchor) {
                broken.push(format!("{}: {link} (no such anchor)", path.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The page of `command`: `docs/commands/lock.acquire.md`.
fn page_path(command: &metadata::Command) -> PathBuf {
    root()
        .join("docs/commands")
        .join(format!("{}.md", command.name.to_ascii_lowercase()))
}

#[test]
fn every_command_has_a_page_and_every_page_a_command() {
    let commands: BTreeSet<PathBuf> = metadata::COMMANDS.iter().map(page_path).collect();
    let pages: BTreeSet<PathBuf> = std::fs::read_dir(root().join("docs/commands"))
        .expect("docs/commands")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.file_name().is_some_and(|name| name != "README.md"))
        .collect();
    assert_eq!(commands.len(), 23, "every file of commands/ parses");
    assert_eq!(pages, commands);
}

/// What a command page says at its top, from the metadata: its syntax, then a table of when it
/// came, what it costs and its ACL categories.
fn expected_header(command: &metadata::Command) -> (String, String) {
    let categories: Vec<String> = command
        .acl_categories
        .iter()
        .map(|category| format!("`@{category}`"))
        .collect();
    let row = format!(
        "| {} | {} | {} |",
        command.since,
        command.complexity,
        categories.join(", ")
    );
    (command.syntax(), row)
}

#[test]
fn every_page_says_what_the_metadata_says() {
    for command in metadata::COMMANDS.iter() {
        let path = page_path(command);
        let text = read(&path);
        let page = parse(&text);
        let (syntax, row) = expected_header(command);
        let shown = path.display();
        assert_eq!(
            text.lines().next(),
            Some(format!("# {}", command.name).as_str()),
            "{shown}: the title"
        );
        let first = page.blocks.first().map(|(_, code)| code.trim());
        assert_eq!(first, Some(syntax.as_str()), "{shown}: the syntax");
        assert!(text.contains(&row), "{shown}: the table row\n{row}");
        for section in ["Reply", "Errors", "Examples", "History"] {
            let anchor = slug(section);
            assert!(page.anchors.contains(&anchor), "{shown}: no '## {section}'");
        }
        assert!(
            text.contains("RESP2") && text.contains("RESP3"),
            "{shown}: the reply in RESP2 and RESP3"
        );
        for (since, changes) in &command.history {
            let line = format!("- `{since}`: {changes}");
            assert!(text.contains(&line), "{shown}: the history line\n{line}");
        }
    }
}
