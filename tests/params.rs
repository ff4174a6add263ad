//! The parameter table, `ompi_info` and the README agree.

mod common;

use common::{ompi_info, openmpi5, params, shown_default};

#[test]
fn ompi_info_lists_the_component() {
    let out = ompi_info(&[]);
    // The coll interface of the series the component was built for.
    let api = if openmpi5() { "2.4.0" } else { "2.0.0" };
    let want = format!("MCA coll: ipmc (MCA v2.1.0, API v{api}");
    assert!(out.lines().any(|l| l.contains(&want)), "{out}");
}

#[test]
fn ompi_info_shows_every_parameter_of_the_table() {
    let out = ompi_info(&["--param", "coll", "ipmc", "--level", "9", "--parsable"]);
    let rows = params();
    for p in rows {
        let key = format!("mca:coll:ipmc:param:coll_ipmc_{}", p.name);
        let get = |field: &str| {
            let prefix = format!("{key}:{field}:");
            out.lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .unwrap_or_else(|| panic!("ompi_info shows no {field} for {}:\n{out}", p.name))
                .to_string()
        };
        let want_default = match (p.ty, shown_default(p).as_str()) {
            ("BOOL", "true") => "true".to_string(),
            ("BOOL", "false") => "false".to_string(),
            (_, v) => v.to_string(),
        };
        assert_eq!(get("value"), want_default, "default of {}", p.name);
        let ty = match p.ty {
            "INT" => "int",
            "SIZE" => "size_t",
            "BOOL" => "bool",
            "STRING" => "string",
            other => panic!("unknown type {other}"),
        };
        assert_eq!(get("type"), ty, "type of {}", p.name);
        assert_eq!(get("level"), p.level.to_string(), "level of {}", p.name);
        let help = get("help");
        assert!(help.len() > 20, "help of {} says little: {help}", p.name);
        assert_eq!(
            help.ends_with(". Must be the same on every rank"),
            p.shared,
            "help of {} (shared {}): {help}",
            p.name,
            p.shared
        );
        // Open MPI takes the names of an enumerated parameter's values (and
        // lists its own for a bool).
        let names: Vec<String> = out
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("{key}:enumerator:value:")))
            .map(String::from)
            .collect();
        let min: i64 = p.min.parse().unwrap_or(0);
        let want: Vec<String> = (min..)
            .zip(p.names)
            .map(|(v, n)| format!("{v}:{n}"))
            .collect();
        if p.ty != "BOOL" {
            assert_eq!(names, want, "values of {}", p.name);
        }
        if p.ty != "BOOL" && p.ty != "STRING" {
            let range = format!("(allowed: {} to {})", p.min, p.max);
            assert!(
                help.contains(&range),
                "help of {} lacks {range}: {help}",
                p.name
            );
        }
    }
    let listed = out
        .lines()
        .filter_map(|l| l.strip_prefix("mca:coll:ipmc:param:"))
        .filter(|l| l.split(':').nth(1) == Some("value"))
        .count();
    assert_eq!(
        listed,
        rows.len(),
        "ompi_info lists parameters the table lacks:\n{out}"
    );
}

/// `ompi_info` as people run it, human-readable: the README's command at every
/// level, a whole framework, and `--all` (attached to bug reports). Each ends
/// with status 0 and lists every parameter and performance variable that the
/// parsable dump names (Open MPI 4.1.4 and 5.0.7 overran an array printing a
/// variable with a description and a list of values, and died).
#[test]
fn ompi_info_human_readable_lists_everything_and_exits_0() {
    let parsable = ompi_info(&["--param", "coll", "ipmc", "--level", "9", "--parsable"]);
    let pvars: Vec<&str> = parsable
        .lines()
        .filter_map(|l| l.strip_prefix("mca:coll:ipmc:pvar:"))
        .filter_map(|l| {
            l.strip_suffix(":class:counter")
                .or(l.strip_suffix(":class:state"))
        })
        .collect();
    assert!(pvars.len() > 20, "few performance variables:\n{parsable}");
    let params: Vec<String> = params()
        .iter()
        .map(|p| format!("coll_ipmc_{}", p.name))
        .collect();
    let listed = |out: &str, what: &[String], kind: &str| {
        for name in what {
            let line = format!("{kind} \"{name}\"");
            assert!(out.contains(&line), "no {line} in:\n{out}");
        }
    };
    let pvars: Vec<String> = pvars.iter().map(|s| s.to_string()).collect();
    for level in 1..=9 {
        let out = ompi_info(&["--param", "coll", "ipmc", "--level", &level.to_string()]);
        assert!(out.contains("MCA coll: ipmc"), "level {level}:\n{out}");
        if level >= 4 {
            listed(&out, &pvars, "performance");
        }
    }
    for args in [&["--param", "coll", "all", "--level", "9"][..], &["--all"]] {
        let out = ompi_info(args);
        listed(&out, &params, "parameter");
        listed(&out, &pvars, "performance");
    }
}

#[test]
fn readme_documents_every_parameter_with_its_default() {
    let readme = std::fs::read_to_string(common::repo().join("README.md")).unwrap();
    for p in params() {
        let row = readme
            .lines()
            .find(|l| l.starts_with(&format!("| `coll_ipmc_{}` |", p.name)))
            .unwrap_or_else(|| panic!("README has no table row for coll_ipmc_{}", p.name));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let want = match shown_default(p).as_str() {
            "" => "(empty)".to_string(),
            v => format!("`{v}`"),
        };
        assert_eq!(cells[2], want, "README default of coll_ipmc_{}", p.name);
        let same = if p.shared { "yes" } else { "" };
        assert_eq!(
            cells[5], same,
            "README: same on every rank, coll_ipmc_{}",
            p.name
        );
    }
}
