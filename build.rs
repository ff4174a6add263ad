//! Generates the Rust declarations of the C glue boundary from `wrapper.h`,
//! and the Rust side of the parameter table (`mca-params/ipmc_params.def`).
//!
//! Only `ompi-glue/ipmc_glue.h` is read: Open MPI's own headers never reach
//! bindgen, so struct layouts of Open MPI stay on the C side.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

fn main() {
    for input in [
        "wrapper.h",
        "ompi-glue/ipmc_glue.h",
        "mca-params/ipmc_params.def",
    ] {
        println!("cargo:rerun-if-changed={input}");
    }
    // Declarations for the oldest Rust the package supports (`rust-version`),
    // not bindgen's newest (1.82's `unsafe extern` blocks fail on older ones).
    let msrv = env::var("CARGO_PKG_RUST_VERSION").expect("Cargo.toml sets rust-version");
    let minor = msrv
        .split('.')
        .nth(1)
        .and_then(|m| m.parse().ok())
        .expect("rust-version is 1.MINOR");
    let target = bindgen::RustTarget::stable(minor, 0)
        .unwrap_or_else(|e| panic!("bindgen cannot target rust-version {msrv}: {e}"));
    let bindings = bindgen::Builder::default()
        .rust_target(target)
        .header("wrapper.h")
        .allowlist_function("ipmc_.*")
        .allowlist_type("ipmc_config_t")
        .allowlist_var("IPMC_.*")
        .opaque_type("ompi_.*")
        .opaque_type("mca_.*")
        .layout_tests(false)
        .generate()
        .expect("bindgen could not read wrapper.h (is libclang installed?)");
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    bindings
        .write_to_file(out.join("glue.rs"))
        .expect("could not write the generated bindings");
    let table = fs::read_to_string("mca-params/ipmc_params.def").expect("the parameter table");
    generate_params(&rows(&table), &out);
    wide_clmul_cfg();
}

/// `ipmc_wide_clmul` where the compiler has the 512-bit carry-less
/// multiplication's intrinsics (stable since Rust 1.89, after the
/// `rust-version`): the datagrams' tag then hashes 16 blocks at a time on
/// CPUs that have it (`src/cpu/polyval.rs`), and the POLYVAL crate's
/// 4 blocks at a time everywhere else.
fn wide_clmul_cfg() {
    println!("cargo:rustc-check-cfg=cfg(ipmc_wide_clmul)");
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = std::process::Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .unwrap_or_default();
    // "rustc 1.MINOR.PATCH (...)"
    let minor: Option<u32> = version
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.split('.').nth(1))
        .and_then(|m| m.parse().ok());
    let x86_64 = env::var("CARGO_CFG_TARGET_ARCH").is_ok_and(|a| a == "x86_64");
    if x86_64 && minor.is_some_and(|m| m >= 89) {
        println!("cargo:rustc-cfg=ipmc_wide_clmul");
    }
}

/// One row of `mca-params/ipmc_params.def` (see the table's header).
struct Row {
    name: String,
    ty: String,
    default: String,
    min: String,
    max: String,
    level: String,
    scope: String,
    help: String,
    /// The names of its values from `min` on (an `IPMC_NAMES` row).
    names: Vec<String>,
}

/// The rows of the parameter table; a malformed row fails the build.
fn rows(table: &str) -> Vec<Row> {
    let mut rows: Vec<Row> = table
        .lines()
        .filter_map(|l| l.strip_prefix("IPMC_PARAM("))
        .map(|row| {
            // The help string, last, may contain commas.
            let f: Vec<&str> = row.splitn(8, ',').map(str::trim).collect();
            assert_eq!(f.len(), 8, "malformed parameter row: {row}");
            let help = f[7]
                .strip_suffix(')')
                .and_then(|h| h.strip_prefix('"'))
                .and_then(|h| h.strip_suffix('"'))
                .unwrap_or_else(|| panic!("help of {} is not a \"string\")", f[0]));
            assert!(
                matches!(f[1], "INT" | "SIZE" | "BOOL" | "STRING"),
                "{}: unknown type {}",
                f[0],
                f[1]
            );
            assert!(
                matches!(f[6], "ALL_EQ" | "LOCAL"),
                "{}: unknown scope {}",
                f[0],
                f[6]
            );
            Row {
                name: f[0].into(),
                ty: f[1].into(),
                default: f[2].into(),
                min: f[3].into(),
                max: f[4].into(),
                level: f[5].into(),
                scope: f[6].into(),
                help: help.into(),
                names: Vec::new(),
            }
        })
        .collect();
    for line in table.lines() {
        let Some(names) = line.strip_prefix("IPMC_NAMES(") else {
            continue;
        };
        let f: Vec<&str> = names
            .strip_suffix(')')
            .unwrap_or_else(|| panic!("malformed names row: {line}"))
            .split(',')
            .map(str::trim)
            .collect();
        let row = rows
            .iter_mut()
            .find(|r| r.name == f[0])
            .unwrap_or_else(|| panic!("names of an unknown parameter: {line}"));
        let range = row.max.parse::<i64>().ok().zip(row.min.parse::<i64>().ok());
        assert!(
            row.ty == "INT" && range.map(|(max, min)| max - min + 1) == Some(f.len() as i64 - 1),
            "{}: names for every value from min to max, of an INT: {line}",
            row.name
        );
        row.names = f[1..]
            .iter()
            .map(|n| {
                let n = n.strip_prefix('"').and_then(|n| n.strip_suffix('"'));
                n.unwrap_or_else(|| panic!("a name is a \"string\": {line}"))
                    .to_string()
            })
            .collect();
    }
    rows
}

impl Row {
    /// The field's Rust type: a count where the parameter cannot be negative.
    fn rust_type(&self) -> &'static str {
        match self.ty.as_str() {
            "INT" if self.min.starts_with('-') => "i32",
            "INT" | "SIZE" => "usize",
            "BOOL" => "bool",
            _ => "String",
        }
    }

    fn rust_default(&self) -> String {
        match self.ty.as_str() {
            "STRING" => format!("{}.to_string()", self.default),
            "INT" | "SIZE" => self.default.replace('_', ""),
            _ => self.default.clone(),
        }
    }

    /// The field from the C struct `c`, whose values the MCA base holds to
    /// the row's range.
    fn c_field(&self) -> String {
        let n = &self.name;
        match (self.ty.as_str(), self.rust_type()) {
            ("STRING", _) => format!("c_string(c.{n})"),
            ("INT", "usize") => format!("usize::try_from(c.{n}).unwrap_or({})", self.default),
            _ => format!("c.{n}"),
        }
    }
}

/// `params.rs`: `Config` with one field per row, its `Default`, the list of
/// rows and the parameters every rank must share; `params_from_c.rs`: the
/// conversion from the glue's `ipmc_config_t`.
fn generate_params(rows: &[Row], out: &Path) {
    let mut s = String::from("// Generated by build.rs from mca-params/ipmc_params.def.\n\n");
    s += "/// The MCA parameters (`coll_ipmc_<field>`), copied when a communicator's\n\
          /// module is created so that later changes of the MCA storage cannot split\n\
          /// ranks. Generated from `mca-params/ipmc_params.def`.\n\
          #[derive(Clone, Debug, PartialEq, Eq)]\npub struct Config {\n";
    for r in rows {
        s += &format!(
            "    /// {}\n    pub {}: {},\n",
            r.help,
            r.name,
            r.rust_type()
        );
    }
    s += "}\n\nimpl Default for Config {\n    /// The table's defaults.\n    fn default() -> Self {\n        Config {\n";
    for r in rows {
        s += &format!("            {}: {},\n", r.name, r.rust_default());
    }
    s += "        }\n    }\n}\n\n";
    s += "/// Every row of the table, in its order.\npub const PARAMS: &[Param] = &[\n";
    for r in rows {
        s += &format!(
            "    Param {{ name: {:?}, ty: {:?}, default: {:?}, min: {:?}, max: {:?}, level: {}, shared: {}, help: {:?}, names: &{:?} }},\n",
            r.name, r.ty, r.default, r.min, r.max, r.level, r.scope == "ALL_EQ", r.help, r.names
        );
    }
    s += "];\n\nimpl Config {\n    /// `name=value` of every parameter that all ranks must share (scope\n    \
          /// `ALL_EQ`), in the table's order.\n    pub fn shared_values(&self) -> String {\n        [\n";
    for r in rows.iter().filter(|r| r.scope == "ALL_EQ") {
        s += &format!("            format!(\"{0}={{:?}}\", self.{0}),\n", r.name);
    }
    s += "        ]\n        .join(\" \")\n    }\n}\n";
    fs::write(out.join("params.rs"), s).expect("could not write params.rs");

    let mut c = String::from(
        "// Generated by build.rs from mca-params/ipmc_params.def.\n\n\
         impl From<&sys::ipmc_config_t> for Config {\n    fn from(c: &sys::ipmc_config_t) -> Self {\n        Config {\n",
    );
    for r in rows {
        c += &format!("            {}: {},\n", r.name, r.c_field());
    }
    c += "        }\n    }\n}\n";
    fs::write(out.join("params_from_c.rs"), c).expect("could not write params_from_c.rs");
}
