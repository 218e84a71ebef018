//! The Python example from README runs against a real server, with redis-py from PyPI
//! installed in a virtualenv under `build/venv`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Server, call};
use redis::Value;

/// The redis-py release the example is tested with.
const REDIS_PY: &str = "redis==6.4.0";

/// `build/venv/bin/python` with redis-py, made on first use.
fn python() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let venv = root.join("build").join("venv");
    let python = venv.join("bin").join("python");
    let ready = |python: &Path| {
        Command::new(python)
            .args(["-c", "import redis"])
            .status()
            .is_ok_and(|status| status.success())
    };
    if !ready(&python) {
        let run = |program: &Path, args: &[&str]| {
            let status = Command::new(program).args(args).status().expect("run");
            assert!(status.success(), "{} {args:?} failed", program.display());
        };
        run(
            Path::new("python3"),
            &["-m", "venv", &venv.to_string_lossy()],
        );
        run(
            &python,
            &[
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                REDIS_PY,
            ],
        );
    }
    python
}

#[test]
fn the_python_example_takes_and_releases_a_lock() {
    let server = Server::start(&[]);
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/python/lock.py");
    let output = Command::new(python())
        .arg(example)
        .arg(server.url())
        .output()
        .expect("run the example");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("acquired invoice:42 with fencing token"),
        "{stdout}"
    );
    assert!(stdout.contains("released"), "{stdout}");
    assert_eq!(
        call(&mut server.client(), &["EXISTS", "invoice:42"]),
        Value::Int(0)
    );
}
