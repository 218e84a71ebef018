//! Each command's metadata — summary, complexity, history, arity, flags, ACL categories, key
//! specs and arguments — from the one place it is kept: `commands/*.json`, one file per
//! command in the shape of Redis's own `src/commands/*.json`. The module creates its commands
//! from it (`lib.rs`: flags, key positions, ACL categories) and tells `COMMAND DOCS` and
//! `COMMAND INFO` about them ([`crate::docs`]); the command pages in `docs/commands/` are
//! checked against it (`tests/docs.rs`).

use std::sync::LazyLock;

use serde::Deserialize;

/// One command.
#[derive(Debug, Deserialize)]
pub struct Command {
    /// Its name, upper case (`LOCK.ACQUIRE`): the key of its file's one entry.
    #[serde(skip)]
    pub name: String,
    /// [`Self::command_flags`], space-separated, as `RedisModule_CreateCommand` takes them.
    #[serde(skip)]
    flags: String,
    /// [`Self::acl_categories`], space-separated, as `RedisModule_SetCommandACLCategories`
    /// takes them.
    #[serde(skip)]
    acl: String,
    /// One sentence on what it does.
    pub summary: String,
    /// Its time complexity.
    pub complexity: String,
    /// The release that brought it.
    pub since: String,
    /// Redis's arity: the number of arguments with the name, negative for "at least".
    pub arity: i32,
    /// What changed when: (release, change).
    #[serde(default)]
    pub history: Vec<(String, String)>,
    /// `RedisModule_CreateCommand`'s flags (`write`, `deny-oom`, ...).
    pub command_flags: Vec<String>,
    /// Its ACL categories, without the `@`.
    pub acl_categories: Vec<String>,
    /// Where its keys are.
    pub key_specs: Vec<KeySpec>,
    /// Its arguments after the name.
    pub arguments: Vec<Argument>,
}

/// Where a command's keys are, as Redis's key specs say it.
#[derive(Debug, Deserialize)]
pub struct KeySpec {
    /// `RW`, `RO`, `ACCESS`, `UPDATE`, `DELETE`, ...
    pub flags: Vec<String>,
    /// Where the search starts.
    pub begin_search: BeginSearch,
    /// How the keys are found from there.
    pub find_keys: FindKeys,
}

/// Where the search for keys starts.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BeginSearch {
    /// At argument `pos`.
    Index {
        /// The argument's position (the name is 0).
        pos: i32,
    },
}

/// How keys are found from where the search starts.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FindKeys {
    /// A range of arguments (`lastkey` 0: one key).
    Range {
        /// The last key, relative to the first; negative from the end.
        lastkey: i32,
        /// Arguments from one key to the next.
        step: i32,
        /// With `lastkey` -1, a share of the rest (0: all).
        limit: i32,
    },
    /// A count, then that many keys (`numkeys key [key ...]`).
    Keynum {
        /// Where the count is, relative to the start.
        keynumidx: i32,
        /// Where the first key is, relative to the start.
        firstkey: i32,
        /// Arguments from one key to the next.
        step: i32,
    },
}

/// One argument, as `COMMAND DOCS` shows it.
#[derive(Debug, Deserialize)]
pub struct Argument {
    /// Its name.
    pub name: String,
    /// `key`, `string`, `integer`, `pure-token`, `block`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// The word before it (`WAIT`), or the word itself for a `pure-token`.
    #[serde(default)]
    pub token: Option<String>,
    /// May be left out.
    #[serde(default)]
    pub optional: bool,
    /// May be given more than once (`key [key ...]`).
    #[serde(default)]
    pub multiple: bool,
    /// The release that brought it, when later than the command.
    #[serde(default)]
    pub since: Option<String>,
    /// For a `block`, its arguments.
    #[serde(default)]
    pub arguments: Vec<Argument>,
}

/// The files, embedded in the module when it is built.
const FILES: [&str; 23] = [
    include_str!("../commands/lock.acquire.json"),
    include_str!("../commands/lock.release.json"),
    include_str!("../commands/lock.renew.json"),
    include_str!("../commands/lock.fence.json"),
    include_str!("../commands/lock.info.json"),
    include_str!("../commands/lock.raise.json"),
    include_str!("../commands/lock.macquire.json"),
    include_str!("../commands/lock.mrelease.json"),
    include_str!("../commands/lock.mrenew.json"),
    include_str!("../commands/lock.insync.json"),
    include_str!("../commands/lock.promotable.json"),
    include_str!("../commands/lock.replconf.json"),
    include_str!("../commands/lock.refused.json"),
    include_str!("../commands/lock.session.json"),
    include_str!("../commands/lock.apply.json"),
    include_str!("../commands/lock.campaign.json"),
    include_str!("../commands/lock.leader.json"),
    include_str!("../commands/lock.proclaim.json"),
    include_str!("../commands/lock.resign.json"),
    include_str!("../commands/lock.observe.json"),
    include_str!("../commands/lock.guard.json"),
    include_str!("../commands/lock.fenced.json"),
    include_str!("../commands/lock.sync.json"),
];

/// Every command, read from [`FILES`] once. A file that does not parse is left out, and its
/// command then fails to be created at load (`tests/docs.rs` parses every file).
pub static COMMANDS: LazyLock<Vec<Command>> =
    LazyLock::new(|| FILES.iter().filter_map(|file| parse(file)).collect());

fn parse(file: &str) -> Option<Command> {
    let entries: serde_json::Map<String, serde_json::Value> = serde_json::from_str(file).ok()?;
    let (name, value) = entries.into_iter().next()?;
    let mut command: Command = serde_json::from_value(value).ok()?;
    command.name = name;
    command.flags = command.command_flags.join(" ");
    command.acl = command.acl_categories.join(" ");
    Some(command)
}

/// The command named `name` (any case).
#[must_use]
pub fn command(name: &str) -> Option<&'static Command> {
    COMMANDS
        .iter()
        .find(|command| command.name.eq_ignore_ascii_case(name))
}

/// `name`'s flags for `RedisModule_CreateCommand`, space-separated.
#[must_use]
pub fn flags(name: &str) -> &'static str {
    command(name).map_or("", |command| &command.flags)
}

/// `name`'s ACL categories for `RedisModule_SetCommandACLCategories`, space-separated.
#[must_use]
pub fn acl_categories(name: &str) -> &'static str {
    command(name).map_or("", |command| &command.acl)
}

/// `name`'s keys as `RedisModule_CreateCommand`'s (first, last, step): the range of its first
/// key spec when it is one, (0, 0, 0) for keys it finds through `getkeys-api`.
#[must_use]
pub fn key_range(name: &str) -> (i32, i32, i32) {
    let spec = command(name).and_then(|command| command.key_specs.first());
    match spec {
        Some(KeySpec {
            begin_search: BeginSearch::Index { pos },
            find_keys: FindKeys::Range { lastkey, step, .. },
            ..
        }) if *lastkey >= 0 => (*pos, pos + lastkey, *step),
        _ => (0, 0, 0),
    }
}

#[cfg(test)]
impl Command {
    /// Its syntax as Redis's command pages write it: `LOCK.ACQUIRE key owner ttl-ms
    /// [REENTRANT] [WAIT timeout-ms] [SHARED [LIMIT limit]]`.
    #[must_use]
    pub fn syntax(&self) -> String {
        std::iter::once(self.name.clone())
            .chain(self.arguments.iter().map(Argument::syntax))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[cfg(test)]
impl Argument {
    fn syntax(&self) -> String {
        let value = match self.kind.as_str() {
            "pure-token" => self.token.clone().unwrap_or_default(),
            "block" => self
                .token
                .iter()
                .cloned()
                .chain(self.arguments.iter().map(Self::syntax))
                .collect::<Vec<_>>()
                .join(" "),
            "oneof" => {
                let choices: Vec<String> = self.arguments.iter().map(Self::syntax).collect();
                let choices = choices.join(" | ");
                if self.optional {
                    choices
                } else {
                    format!("<{choices}>")
                }
            }
            _ => match &self.token {
                Some(token) => format!("{token} {}", self.name),
                None => self.name.clone(),
            },
        };
        let value = if self.multiple {
            format!("{value} [{value} ...]")
        } else {
            value
        };
        if self.optional {
            format!("[{value}]")
        } else {
            value
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_parses() {
        assert_eq!(COMMANDS.len(), FILES.len());
    }

    #[test]
    fn syntax_and_key_ranges_follow_the_metadata() {
        let syntax = |name| command(name).map(Command::syntax);
        let acquire = "LOCK.ACQUIRE key owner ttl-ms [REENTRANT] [WAIT timeout-ms] \
                       [SHARED [LIMIT limit]] [SESSION id] [SYNC | NOSYNC]";
        assert_eq!(syntax("lock.acquire").as_deref(), Some(acquire));
        let mrelease = "LOCK.MRELEASE numkeys key [key ...] owner";
        assert_eq!(syntax("LOCK.MRELEASE").as_deref(), Some(mrelease));
        let session =
            "LOCK.SESSION <OPEN [GRACE grace-ms] | ATTACH id | USE <id | NONE> | CLOSE id | HELP>";
        assert_eq!(syntax("lock.session").as_deref(), Some(session));
        assert_eq!(key_range("lock.acquire"), (1, 1, 1));
        assert_eq!(key_range("lock.macquire"), (0, 0, 0));
        assert_eq!(flags("lock.fence"), "readonly fast");
    }
}
