//! The crate's folders are layers (`docs/architecture.md`): no module imports
//! from a layer above its own. Tests inside a module (`#[cfg(test)]`) may use
//! anything.

use std::path::{Path, PathBuf};

/// The layers, from the ground up.
const LAYERS: [&str; 11] = [
    "cpu",
    "protocol",
    "base",
    "platform",
    "net",
    "algorithms",
    "group",
    "driver",
    "engine",
    "component",
    "ffi",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without comments and without its test module.
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|l| l.trim_start().starts_with("mod "))
        {
            break;
        }
        let code = line.split("//").next().unwrap();
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// Every layer named by a `crate::LAYER` path in `code`.
fn imported(code: &str) -> Vec<&str> {
    code.match_indices("crate::")
        .map(|(i, m)| {
            let rest = &code[i + m.len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

#[test]
fn no_module_imports_from_a_layer_above_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut upward = Vec::new();
    let mut placed = 0;
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_str()
            .unwrap();
        let Some(own) = LAYERS.iter().position(|l| *l == top) else {
            // lib.rs, and the tests' in-memory network.
            assert!(
                top == "lib.rs" || top == "testing",
                "{} is in no layer: add its folder to LAYERS and docs/architecture.md",
                rel.display()
            );
            continue;
        };
        placed += 1;
        let text = std::fs::read_to_string(file).unwrap();
        for layer in imported(&code(&text)) {
            match LAYERS.iter().position(|l| *l == layer) {
                Some(other) if other > own => {
                    upward.push(format!("{} ({top}) imports from {layer}", rel.display()))
                }
                Some(_) => {}
                None => panic!("{}: crate::{layer} is in no layer", rel.display()),
            }
        }
    }
    assert!(
        placed > 30,
        "only {placed} files found under {}",
        src.display()
    );
    assert!(
        upward.is_empty(),
        "imports from a layer above:\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_check_sees_imports_and_skips_comments_and_tests() {
    let text = "use crate::driver::io;\n// crate::ffi::x\nfn f() { crate::component::g() } // crate::ffi\n\
                #[cfg(test)]\nmod tests {\n    use crate::ffi::y;\n}\n";
    assert_eq!(imported(&code(text)), ["driver", "component"]);
}
