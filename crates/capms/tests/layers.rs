//! The house rules of `docs/architecture.md`, checked from the source: the product's layers
//! import only downward, and no two files of any crate import each other, directly or round
//! a circle. `make lint` runs it, so that breaking a rule fails CI.
//!
//! It reads `use` declarations and `crate::` paths, resolving `crate`, `self` and `super` and a
//! file's own child modules; what names another crate is left out, and so is a file's import of
//! its own ancestor modules (the room it is in). Unit-test modules (`tests/`
//! folders, `tests.rs`) may import anything and are not read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The product's top modules, by floor: a module may import from its own and lower floors, and
/// on its own floor only from itself, except where `SAME_FLOOR` allows.
const FLOORS: &[&[&str]] = &[
    // The facts and the plumbing.
    &[
        "api",
        "capi",
        "ownership",
        "networks",
        "metrics",
        "kube_client",
        "tls",
        "telemetry",
    ],
    &["cache", "conversion"],
    &["reconciler"],
    &["controllers", "webhooks"],
    &["server", "leader"],
    &["runtime"],
];

/// Same-floor imports the architecture allows: the facts build on each other.
const SAME_FLOOR: &[(&str, &str)] = &[("ownership", "api"), ("kube_client", "metrics")];

type Module = Vec<String>;

/// One crate's source: each module's file, and each file's module.
struct Crate {
    files: BTreeMap<Module, PathBuf>,
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() && name != "tests" {
            rust_files(&path, out);
        } else if name.ends_with(".rs") && name != "tests.rs" {
            out.push(path);
        }
    }
}

/// The module a file under `src` holds: `a/b.rs` and `a/b/mod.rs` are `a::b`.
fn module_of(src: &Path, file: &Path) -> Module {
    let relative = file.strip_prefix(src).unwrap_or(file).with_extension("");
    let mut module: Module = relative
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    if matches!(
        module.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        module.pop();
    }
    module
}

impl Crate {
    fn read(src: &Path) -> Crate {
        let mut found = Vec::new();
        rust_files(src, &mut found);
        let files = found
            .into_iter()
            // main.rs and lib.rs are both the root; the binary's root is read as the library's.
            .filter(|f| !(f.ends_with("main.rs") && src.join("lib.rs").exists()))
            .map(|f| (module_of(src, &f), f))
            .collect();
        Crate { files }
    }

    /// The file that holds `path`: its longest prefix that is a module.
    fn file_of(&self, path: &[String]) -> Option<&Module> {
        (0..=path.len())
            .rev()
            .find_map(|n| self.files.get_key_value(&path[..n]).map(|(m, _)| m))
    }
}

/// `a::{b, c::{d, e}}` as `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.split(" as ").next().unwrap_or(tree).trim().to_owned()];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    let parts = parts.into_iter().filter(|p| !p.trim().is_empty());
    parts
        .flat_map(expand)
        .map(|p| format!("{prefix}{p}"))
        .collect()
}

/// The `use` declarations of `text`, each expanded into plain paths.
fn uses(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("use ") {
        let before = &rest[..at];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let head = before[line_start..].trim();
        let after = &rest[at + 4..];
        let end = after.find(';').unwrap_or(after.len());
        if head.is_empty() || head == "pub" || head.starts_with("pub(") {
            let declaration = after[..end]
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            out.extend(expand(&declaration));
        }
        rest = &after[end.min(after.len())..];
    }
    out
}

/// The `crate::…` paths written anywhere in `text`.
fn crate_paths(text: &str) -> Vec<String> {
    text.match_indices("crate::")
        .filter(|(i, _)| !text[..*i].ends_with(|c: char| c.is_alphanumeric() || c == '_'))
        .map(|(i, _)| {
            let path = &text[i..];
            let end = path
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(path.len());
            path[..end].trim_end_matches(':').to_owned()
        })
        .collect()
}

/// A path as written in `module` (a file's), made absolute; None when it names another crate.
fn absolute(path: &str, module: &Module, children: &[String]) -> Option<Module> {
    let mut segments = path.split("::").filter(|s| !s.is_empty());
    let first = segments.next()?;
    let mut base: Module = match first {
        "crate" => Vec::new(),
        "self" => module.clone(),
        "super" => {
            let mut m = module.clone();
            m.pop();
            m
        }
        _ if children.iter().any(|c| c == first) => {
            let mut m = module.clone();
            m.push(first.to_owned());
            m
        }
        _ => return None,
    };
    for s in segments {
        match s {
            "super" => {
                base.pop();
            }
            "self" | "*" => {}
            _ => base.push(s.to_owned()),
        }
    }
    Some(base)
}

/// The child modules a file declares (`mod x;`).
fn children(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter_map(|l| {
            let l = l.strip_prefix("pub ").or(Some(l))?;
            let l = l.strip_prefix("pub(crate) ").unwrap_or(l);
            let name = l.strip_prefix("mod ")?.strip_suffix(';')?;
            Some(name.trim().to_owned())
        })
        .collect()
}

/// Each file's imports of other files of its crate (by module), and every `crate::` path it
/// writes (absolute).
fn imports(krate: &Crate) -> BTreeMap<Module, (BTreeSet<Module>, Vec<Module>)> {
    let mut out = BTreeMap::new();
    for (module, file) in &krate.files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        // What follows a file's unit-test module is test code.
        let text = text.split("#[cfg(test)]\nmod tests {").next().unwrap_or("");
        let kids = children(text);
        let resolve = |p: &String| absolute(p, module, &kids);
        let mut files = BTreeSet::new();
        for path in uses(text).iter().filter_map(resolve) {
            // A module's own ancestors hold what their children share (a `mod.rs` declaring
            // the shape its children fill); reaching up to them is not counted.
            if let Some(target) = krate.file_of(&path)
                && !module.starts_with(target)
            {
                files.insert(target.clone());
            }
        }
        let written = crate_paths(text).iter().filter_map(resolve).collect();
        out.insert(module.clone(), (files, written));
    }
    out
}

fn floor_of(top: &str) -> Option<usize> {
    FLOORS.iter().position(|f| f.contains(&top))
}

/// Imports of the product's modules that break the floors.
fn layer_breaks(imports: &BTreeMap<Module, (BTreeSet<Module>, Vec<Module>)>) -> Vec<String> {
    let mut out = BTreeSet::new();
    for (module, (_, written)) in imports {
        let Some(from) = module.first() else { continue };
        let Some(from_floor) = floor_of(from) else {
            continue;
        };
        for target in written {
            let Some(to) = target.first().filter(|t| *t != from) else {
                continue;
            };
            let Some(to_floor) = floor_of(to) else {
                continue;
            };
            let allowed =
                to_floor < from_floor || SAME_FLOOR.contains(&(from.as_str(), to.as_str()));
            if !allowed {
                out.insert(format!(
                    "{} imports {}",
                    module.join("::"),
                    target.join("::")
                ));
            }
        }
    }
    out.into_iter().collect()
}

/// The circles among a crate's files, each once, as `a -> b -> a`.
fn circles(imports: &BTreeMap<Module, (BTreeSet<Module>, Vec<Module>)>) -> Vec<String> {
    let mut found = BTreeSet::new();
    for start in imports.keys() {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        let mut seen = BTreeSet::new();
        while let Some((at, trail)) = stack.pop() {
            let Some((next, _)) = imports.get(&at) else {
                continue;
            };
            for n in next {
                if n == start && trail.len() > 1 {
                    let mut circle = trail.clone();
                    // Each circle once: from its least file.
                    let least = circle
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, m)| *m)
                        .map_or(0, |(i, _)| i);
                    circle.rotate_left(least);
                    let names: Vec<String> = circle.iter().map(|m| m.join("::")).collect();
                    found.insert(names.join(" -> "));
                } else if seen.insert(n.clone()) {
                    let mut longer = trail.clone();
                    longer.push(n.clone());
                    stack.push((n.clone(), longer));
                }
            }
        }
    }
    found.into_iter().collect()
}

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn the_product_imports_only_downward() {
    let capms = Crate::read(&crates_dir().join("capms/src"));
    let breaks = layer_breaks(&imports(&capms));
    assert!(
        breaks.is_empty(),
        "imports against docs/architecture.md's layers:\n{}",
        breaks.join("\n")
    );
}

#[test]
fn no_crate_has_an_import_circle() {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(crates_dir())
        .into_iter()
        .flatten()
        .flatten()
    {
        let src = entry.path().join("src");
        if src.is_dir() {
            let krate = Crate::read(&src);
            let name = entry.file_name().to_string_lossy().into_owned();
            all.extend(
                circles(&imports(&krate))
                    .into_iter()
                    .map(|c| format!("{name}: {c}")),
            );
        }
    }
    assert!(all.is_empty(), "import circles:\n{}", all.join("\n"));
}

#[test]
fn the_reader_sees_what_it_must() {
    let text = "use super::{a, b::{c, D as E}};\npub(crate) use crate::x::y;\nmod kid;\nuse kid::Z;\nfn f() { crate::q::r(); let s = \"not use here\"; }";
    assert_eq!(
        uses(text),
        [
            "super::a",
            "super::b::c",
            "super::b::D",
            "crate::x::y",
            "kid::Z"
        ]
    );
    assert_eq!(crate_paths(text), ["crate::x::y", "crate::q::r"]);
    let module: Module = vec!["m".into(), "n".into()];
    let kids = children(text);
    assert_eq!(
        absolute("super::a", &module, &kids),
        Some(vec!["m".into(), "a".into()])
    );
    assert_eq!(
        absolute("kid::Z", &module, &kids),
        Some(vec!["m".into(), "n".into(), "kid".into(), "Z".into()])
    );
    assert_eq!(absolute("serde::Serialize", &module, &kids), None);
}
