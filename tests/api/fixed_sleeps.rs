//! No test waits a fixed time for something to happen, or for capms not to do it: a sleep
//! cannot tell "did not act" from "has not looked yet", and on a loaded machine it ends before
//! what it waits for. Tests wait on conditions, and on capms's own report that it looked
//! (`capms_test_support::activity`). A sleep of a second or more in the tests or their support
//! needs a `sleep-ok:` comment on its line or the one before, saying why time itself is what
//! the test needs (a poll's interval, a cache's age).

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() && !path.ends_with("target") && !path.ends_with("go") {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// How long a sleep's argument waits, when it is a literal (`Duration::from_secs(5)`); None for
/// anything else, which counts as long.
fn literal_millis(argument: &str) -> Option<u64> {
    let number = |prefix: &str| {
        let rest = argument.split_once(prefix)?.1;
        rest.split(')')
            .next()?
            .trim()
            .replace('_', "")
            .parse::<u64>()
            .ok()
    };
    number("from_millis(").or_else(|| number("from_secs(").map(|s| s * 1000))
}

/// The sleeps of a second or more in `text` without a `sleep-ok:` reason: `line: code`.
fn unexplained_sleeps(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some((_, argument)) = line.split_once("sleep(") else {
            continue;
        };
        if line.trim_start().starts_with("//")
            || literal_millis(argument).is_some_and(|ms| ms < 1000)
        {
            continue;
        }
        let explained = |l: &str| l.contains("sleep-ok:");
        if !(explained(line) || i > 0 && explained(lines[i - 1])) {
            found.push(format!("{}: {}", i + 1, line.trim()));
        }
    }
    found
}

#[test]
fn no_test_sleeps_a_second_or_more_without_saying_why() {
    let root = capms_test_support::repo_root();
    let mut files = Vec::new();
    rust_files(&root.join("tests"), &mut files);
    rust_files(&root.join("crates/test-support/src"), &mut files);
    assert!(files.len() > 50, "found only {} files", files.len());
    let mut unexplained = Vec::new();
    // This file quotes the sleeps it looks for.
    files.retain(|f| !f.ends_with("api/fixed_sleeps.rs"));
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read");
        for sleep in unexplained_sleeps(&text) {
            unexplained.push(format!("{}:{sleep}", file.display()));
        }
    }
    assert!(
        unexplained.is_empty(),
        "fixed sleeps (wait on a condition or on capms's report that it looked instead):\n{}",
        unexplained.join("\n")
    );
}

#[test]
fn the_rule_tells_polls_from_waits() {
    let text = "loop {\n    tokio::time::sleep(Duration::from_millis(200)).await;\n}\n\
                tokio::time::sleep(Duration::from_secs(6)).await;\n\
                // sleep-ok: the listing ages past its limit\n\
                tokio::time::sleep(Duration::from_millis(2100)).await;\n\
                std::thread::sleep(wait);\n";
    assert_eq!(
        unexplained_sleeps(text),
        [
            "4: tokio::time::sleep(Duration::from_secs(6)).await;",
            "7: std::thread::sleep(wait);"
        ]
    );
}
