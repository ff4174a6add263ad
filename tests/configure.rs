//! `configure.m4`, the check that Open MPI's configure runs for ipmc inside
//! its source tree, run by autoconf in a configure script of its own (Open
//! MPI's takes minutes; `scripts/in-tree-build` runs that one): a cargo older
//! than the `rust-version` of `Cargo.toml`, one that does not run, and none
//! at all, no libclang for bindgen, and an Open MPI that cannot load a DSO
//! each leave the component out with a warning that says why, so that Open
//! MPI's build goes on without it rather than failing in `make` (or
//! installing a component that is never loaded); the crates that a build of
//! the component fetched pass the crates check.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A scratch tree in which `ompi/mca/coll/ipmc` is this repository and
/// `configure` calls ipmc's check, printing which way it went.
struct Tree(PathBuf);

impl Tree {
    fn new(name: &str) -> Tree {
        let dir =
            std::env::temp_dir().join(format!("ipmc-configure-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("ompi/mca/coll")).unwrap();
        std::os::unix::fs::symlink(env!("CARGO_MANIFEST_DIR"), dir.join("ompi/mca/coll/ipmc"))
            .unwrap();
        fs::write(
            dir.join("configure.ac"),
            "AC_INIT([ipmc-configure-check], [1])\n\
             m4_include([ompi/mca/coll/ipmc/configure.m4])\n\
             MCA_ompi_coll_ipmc_CONFIG([echo 'coll:ipmc: can compile'], \
             [echo 'coll:ipmc: can not compile'])\n",
        )
        .unwrap();
        let out = Command::new("autoconf")
            .current_dir(&dir)
            .output()
            .expect("autoconf runs (scripts/deps installs it)");
        assert!(
            out.status.success(),
            "autoconf: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tree(dir)
    }

    /// A stand-in for cargo: a script with `body`.
    fn cargo(&self, body: &str) -> PathBuf {
        let path = self.0.join("cargo");
        fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// A stand-in for cargo that says it is `version` and succeeds at
    /// whatever it is asked (the crates check's `cargo fetch`).
    fn cargo_of(&self, version: &str) -> PathBuf {
        self.cargo(&format!("echo 'cargo {version} (0123456789 2025-01-01)'"))
    }

    /// `./configure`'s output, with `CARGO` set (or not, and `PATH` without
    /// any cargo); it must end well whatever the component's fate.
    fn configure(&self, cargo: Option<&Path>) -> String {
        self.configure_with(Command::new("./configure"), cargo)
    }

    /// As [`Tree::configure`], by `cmd` (which runs `./configure`).
    fn configure_with(&self, mut cmd: Command, cargo: Option<&Path>) -> String {
        cmd.current_dir(&self.0);
        match cargo {
            Some(c) => cmd.env("CARGO", c),
            None => cmd
                .env_remove("CARGO")
                .env("PATH", "/usr/bin:/bin")
                .env("HOME", &self.0),
        };
        let out = cmd.output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "configure failed:\n{text}");
        text
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The Rust that `Cargo.toml` states.
fn rust_version() -> String {
    env!("CARGO_PKG_RUST_VERSION").to_string()
}

/// The cargo that builds these tests.
fn real_cargo() -> PathBuf {
    PathBuf::from(env!("CARGO"))
}

fn skipped(out: &str, why: &str) {
    assert!(
        out.contains("coll:ipmc: can not compile") && !out.contains("coll:ipmc: can compile"),
        "not left out:\n{out}"
    );
    assert!(out.contains(why), "no warning {why:?}:\n{out}");
}

#[test]
fn a_cargo_older_than_the_stated_rust_leaves_the_component_out() {
    let tree = Tree::new("old");
    let need = rust_version();
    let (major, minor) = need.split_once('.').unwrap();
    let older = format!("{major}.{}.3", minor.parse::<u32>().unwrap() - 1);
    let cargo = tree.cargo_of(&older);
    let out = tree.configure(Some(&cargo));
    skipped(
        &out,
        &format!(
            "coll:ipmc needs Rust {need} or later; {} is cargo {older}: the component will not be built",
            cargo.display()
        ),
    );
    // Neither the minor version alone nor the major one decides.
    let cargo = tree.cargo_of(&format!("0.{}", u32::MAX));
    skipped(
        &tree.configure(Some(&cargo)),
        "the component will not be built",
    );
}

#[test]
fn a_cargo_that_does_not_run_or_none_leaves_the_component_out() {
    let tree = Tree::new("none");
    let need = rust_version();
    let cargo = tree.cargo("exit 1");
    skipped(
        &tree.configure(Some(&cargo)),
        &format!("\"{} --version\" did not run", cargo.display()),
    );
    skipped(
        &tree.configure(None),
        &format!("coll:ipmc needs cargo (Rust {need} or later)"),
    );
}

#[test]
fn the_stated_rust_or_a_later_one_passes_the_version_check() {
    let tree = Tree::new("new");
    let need = rust_version();
    for version in [
        format!("{need}.0"),
        "1.200.0-nightly".to_string(),
        "2.0.1".to_string(),
    ] {
        let cargo = tree.cargo_of(&version);
        let out = tree.configure(Some(&cargo));
        assert!(
            out.contains(&format!("is Rust {need} or later... yes ({version})")),
            "{version} refused:\n{out}"
        );
    }
    // The real one: as far as the version goes (the crates offline are
    // `scripts/in-tree-build`'s to show).
    let out = tree.configure(Some(&real_cargo()));
    assert!(
        out.contains(&format!("is Rust {need} or later... yes (")),
        "{out}"
    );
}

#[test]
fn without_libclang_the_component_is_left_out() {
    let tree = Tree::new("libclang");
    // A cargo that passes the checks before this one (its version, the
    // crates offline, which a real one's cache need not hold here), so
    // that libclang alone decides.
    let cargo = tree.cargo_of(&format!("{}.0", rust_version()));
    let out = tree.configure(Some(&cargo));
    assert!(
        out.contains("for the libclang that bindgen loads to build coll:ipmc... /")
            && out.contains("coll:ipmc: can compile"),
        "libclang not found here:\n{out}"
    );
    // Every libclang where bindgen would look, hidden in a mount namespace
    // of this configure's own (a file that is not a regular one).
    let mut hide = Command::new("unshare");
    hide.args(["-m", "sh", "-c"]).arg(
        "for f in $(find /usr/lib* /usr/local -name 'libclang*.so*' 2>/dev/null); do \
             mount --bind /dev/null \"$f\" || exit 1; done; exec ./configure",
    );
    let out = tree.configure_with(hide, Some(&cargo));
    assert!(
        out.contains("crates of coll:ipmc are available offline... yes"),
        "{out}"
    );
    skipped(
        &out,
        "coll:ipmc needs libclang to build (Debian: libclang-dev)",
    );
}

/// A cargo home holding what a `cargo build` of the component leaves in a
/// cache: the registry's index and the crates that this platform's build
/// needs, taken from the real cache one by one as `cargo fetch --offline
/// --target <host>` names them missing, so that none that only other
/// platforms need (`windows-sys` …) is there, wherever the real cache was
/// filled.
fn cache_of_a_build(dir: &Path) -> PathBuf {
    let real = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cargo"))
        .join("registry");
    let home = dir.join("cargo-home");
    fs::create_dir_all(home.join("registry")).unwrap();
    let copied = Command::new("cp")
        .arg("-a")
        .arg(real.join("index"))
        .arg(home.join("registry"))
        .status()
        .unwrap();
    assert!(copied.success(), "no registry index in {}", real.display());
    let host = String::from_utf8(
        Command::new(real_cargo())
            .arg("-vV")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .lines()
    .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
    .expect("cargo -vV names its host");
    let registries: Vec<PathBuf> = fs::read_dir(real.join("cache"))
        .unwrap()
        .map(|r| r.unwrap().path())
        .collect();
    let mut fetched = 0;
    loop {
        let out = Command::new(real_cargo())
            .args(["fetch", "--offline", "--locked", "--target", &host])
            .env("CARGO_HOME", &home)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        if out.status.success() {
            break;
        }
        // "error: failed to download `name vX.Y.Z`"
        let err = String::from_utf8_lossy(&out.stderr);
        let missing = err
            .split("failed to download `")
            .nth(1)
            .and_then(|rest| rest.split('`').next())
            .and_then(|p| p.split_once(" v"))
            .map(|(name, version)| format!("{name}-{version}.crate"))
            .unwrap_or_else(|| panic!("cargo fetch failed otherwise:\n{err}"));
        let from = registries
            .iter()
            .find(|r| r.join(&missing).exists())
            .unwrap_or_else(|| panic!("{missing} is not in {}", real.display()));
        let to = home.join("registry/cache").join(from.file_name().unwrap());
        fs::create_dir_all(&to).unwrap();
        fs::copy(from.join(&missing), to.join(&missing)).unwrap();
        fetched += 1;
        assert!(fetched < 1000, "cargo fetch asks for crate after crate");
    }
    home
}

#[test]
fn the_crates_that_a_build_of_the_component_fetched_are_enough() {
    let tree = Tree::new("crates");
    let home = cache_of_a_build(&tree.0);
    let configure = || {
        let mut cmd = Command::new("./configure");
        cmd.env("CARGO_HOME", &home);
        tree.configure_with(cmd, Some(&real_cargo()))
    };
    let out = configure();
    assert!(
        out.contains("crates of coll:ipmc are available offline... yes"),
        "{out}"
    );
    // One of them missing (blake3, a dependency of the component's own):
    // the check still looks at each.
    let mut removed = 0;
    for registry in fs::read_dir(home.join("registry/cache")).unwrap() {
        for file in fs::read_dir(registry.unwrap().path()).unwrap() {
            let file = file.unwrap().path();
            if file
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("blake3-1.")
            {
                fs::remove_file(file).unwrap();
                removed += 1;
            }
        }
    }
    assert_eq!(removed, 1, "one blake3 in the build's crates");
    skipped(
        &configure(),
        "cargo could not find the crates of coll:ipmc offline",
    );
}

#[test]
fn an_open_mpi_without_dlopen_leaves_the_component_out() {
    let tree = Tree::new("dlopen");
    // What Open MPI's --disable-dlopen sets before its components' checks.
    let mut cmd = Command::new("./configure");
    cmd.env("enable_dlopen", "no");
    skipped(
        &tree.configure_with(cmd, Some(&real_cargo())),
        "coll:ipmc is always built as a DSO, and this Open MPI cannot load one (--disable-dlopen)",
    );
}
