//! `udev/99-zcpipe.rules` parses as udev rules (udev(7), "RULES FILES") and covers every
//! node zcpipe opens on a board. `udevadm verify` (systemd >= 254) would do the syntax part,
//! but Debian 12 ships systemd 252, so the grammar is checked here; when a newer udevadm is
//! present it is run too.

use std::collections::BTreeSet;
use std::process::Command;

const RULES: &str = include_str!("../../udev/99-zcpipe.rules");

/// Keys a rule may match on (with `==` / `!=`) and keys it may assign (with `=`, `+=`,
/// `-=`, `:=`), as udev(7) lists them; only the ones a device-permission file needs.
const MATCH_KEYS: &[&str] =
    &["ACTION", "DEVPATH", "KERNEL", "NAME", "SYMLINK", "SUBSYSTEM", "DRIVER", "KERNELS", "SUBSYSTEMS", "DRIVERS"];
const ASSIGN_KEYS: &[&str] = &["OWNER", "GROUP", "MODE", "TAG", "SYMLINK", "RUN"];

/// One `KEY op "value"` pair of a rule line.
#[derive(Debug, PartialEq)]
struct Pair {
    key: String,
    op: String,
    value: String,
}

/// Splits a rule line into its comma-separated pairs, or says what is wrong.
fn parse_line(line: &str) -> Result<Vec<Pair>, String> {
    let mut pairs = vec![];
    let mut rest = line.trim();
    while !rest.is_empty() {
        let key_end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '{' || c == '}'))
            .ok_or("a key without operator")?;
        let key = rest[..key_end].to_string();
        let after = &rest[key_end..];
        let op = ["==", "!=", "+=", "-=", ":=", "="]
            .iter()
            .find(|o| after.starts_with(**o))
            .ok_or(format!("{key}: no operator"))?;
        let after = &after[op.len()..];
        let body = after.strip_prefix('"').ok_or(format!("{key}: value not quoted"))?;
        let close = body.find('"').ok_or(format!("{key}: unterminated value"))?;
        pairs.push(Pair { key, op: op.to_string(), value: body[..close].to_string() });
        rest = body[close + 1..].trim_start();
        if let Some(r) = rest.strip_prefix(',') {
            rest = r.trim_start();
            if rest.is_empty() {
                return Err("trailing comma".into());
            }
        } else if !rest.is_empty() {
            return Err(format!("expected a comma before {rest:?}"));
        }
    }
    Ok(pairs)
}

fn rules() -> Vec<(usize, Vec<Pair>)> {
    RULES
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(|(i, l)| (i + 1, parse_line(l).unwrap_or_else(|e| panic!("udev/99-zcpipe.rules:{}: {e}: {l}", i + 1))))
        .collect()
}

#[test]
fn every_line_is_a_well_formed_rule() {
    let all = rules();
    assert_eq!(all.len(), 9, "rule lines");
    for (n, pairs) in &all {
        assert!(pairs.iter().any(|p| p.op == "=="), "line {n}: a rule with no match key applies to every device");
        for p in pairs {
            match p.op.as_str() {
                "==" | "!=" => assert!(MATCH_KEYS.contains(&p.key.as_str()), "line {n}: {} is not a match key", p.key),
                _ => assert!(ASSIGN_KEYS.contains(&p.key.as_str()), "line {n}: {} is not an assignment key", p.key),
            }
            if p.key == "MODE" {
                assert!(
                    p.value.len() == 4 && p.value.chars().all(|c| ('0'..='7').contains(&c)),
                    "line {n}: MODE {:?} is not octal",
                    p.value
                );
                assert_eq!(p.value, "0660", "line {n}: group read-write, nothing for others");
            }
            if p.key == "GROUP" {
                assert_eq!(p.value, "zcpipe", "line {n}");
            }
        }
        assert!(
            pairs.iter().any(|p| p.key == "GROUP") && pairs.iter().any(|p| p.key == "MODE"),
            "line {n}: sets GROUP and MODE"
        );
    }
}

#[test]
fn the_rules_cover_every_node_zcpipe_opens() {
    let matched: BTreeSet<String> = rules()
        .iter()
        .flat_map(|(_, ps)| ps.iter().filter(|p| p.op == "==").map(|p| format!("{}={}", p.key, p.value)))
        .collect();
    for want in [
        "SUBSYSTEM=dma_heap",    // /dev/dma_heap/*
        "KERNEL=udmabuf",        // /dev/udmabuf
        "SUBSYSTEM=video4linux", // /dev/video*, /dev/v4l-subdev*
        "KERNEL=rga",            // /dev/rga (librga)
        "KERNEL=mpp_service",    // /dev/mpp_service
        "KERNEL=rknpu",          // /dev/rknpu (older BSP NPU driver)
        "KERNEL=renderD*",       // the NPU as a DRM render node (newer rknpu)
        "KERNEL=card[0-9]*",     // /dev/dri/card* (--display, --heap drm)
    ] {
        assert!(matched.contains(want), "no rule matches {want}; have {matched:?}");
    }
}

#[test]
fn parser_rejects_broken_lines() {
    assert!(parse_line(r#"KERNEL=="rga", GROUP="zcpipe", MODE="0660""#).is_ok());
    assert!(parse_line(r#"KERNEL=="rga" GROUP="zcpipe""#).unwrap_err().contains("comma"));
    assert!(parse_line(r#"KERNEL=="rga", GROUP=zcpipe"#).unwrap_err().contains("not quoted"));
    assert!(parse_line(r#"KERNEL=="rga", GROUP="zcpipe"#).unwrap_err().contains("unterminated"));
    assert!(parse_line(r#"KERNEL=="rga","#).unwrap_err().contains("trailing comma"));
}

#[test]
fn udevadm_verify_accepts_the_file_when_available() {
    // `udevadm verify` exists from systemd 254; older udevadm prints usage and fails.
    let probe = Command::new("udevadm").args(["verify", "--help"]).output();
    match probe {
        Ok(o) if o.status.success() => {
            let o = Command::new("udevadm")
                .args(["verify", concat!(env!("CARGO_MANIFEST_DIR"), "/udev/99-zcpipe.rules")])
                .output()
                .unwrap();
            assert!(o.status.success(), "udevadm verify: {}", String::from_utf8_lossy(&o.stderr));
            println!("udevadm verify: ok");
        }
        _ => println!("udevadm verify is not available here (systemd < 254): the grammar test above stands in"),
    }
}
