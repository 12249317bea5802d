//! Message sizes and the frame layouts the ring transport gives them.

use super::*;

#[test]
fn sizes_parse() {
    let b = |s: &str| parse_size(s).map(|m| m.bytes);
    assert_eq!(b("64"), Ok(64));
    assert_eq!(b("4K"), Ok(4096));
    assert_eq!(b("4KiB"), Ok(4096));
    assert!(b("64k").is_err());
    assert_eq!(b("1M"), Ok(1 << 20));
    assert_eq!(b("1m"), Ok(1 << 20));
    assert_eq!(b("1080p"), Ok(3_110_400));
    assert_eq!(b("3110400").map(|_| parse_size("3110400").unwrap().label()), Ok("1080p".into()));
    assert_eq!(b("480p"), Ok(460_800));
    assert_eq!(b("4k"), Ok(12_441_600));
    assert_eq!(b("2160p"), Ok(12_441_600));
    assert!(b("0").is_err());
    assert!(b("65M").is_err());
    assert!(b("12q").is_err());
    assert!(b("").is_err());
    assert!(b("K").is_err());
    assert_eq!(parse_size("64K").unwrap().label(), "64 KiB");
    assert_eq!(parse_size("100").unwrap().label(), "100 B");
}

#[test]
fn layouts_validate() {
    for s in ["1", "64", "4K", "64K", "1M", "480p", "1080p", "4k", "12345", "64M"] {
        let m = parse_size(s).unwrap();
        let l = transports::layout_for(&m);
        let need = l.bytes_needed().max(m.bytes as u64);
        assert!(l.bytes_needed() >= m.bytes as u64, "{s}");
        l.validate(&[need.div_ceil(4096) * 4096]).unwrap_or_else(|e| panic!("{s}: {e}"));
    }
}
