//! Recorded clips in the web view (with `--http-clips DIR`, which `zcpipe run` sets from
//! `--record-dir`): `/api/clips`, the index's newest rows as JSON; `/clips/<id>.mp4`, a
//! clip's file with HTTP range requests (RFC 9110 14: one range, `206 Partial Content`, so a
//! `<video>` element seeks); the page lists each camera's clips and plays them.
//!
//! The index is opened read-only per request ([`zcpipe_clips::Index::open_read`]); a file is
//! served only by the id of its row, and only when the row's path stays inside the record
//! folder. A range response holds at most [`MAX_RANGE`] bytes: a larger or open-ended range
//! is answered with its first [`MAX_RANGE`] bytes, as a server may, and the browser asks for
//! the rest; a request without a range gets the whole clip (up to [`MAX_WHOLE`]).

use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path};

use zcpipe_clips::Kind;

use super::Reply;

/// The most bytes of a clip one range response carries.
pub(crate) const MAX_RANGE: u64 = 4 << 20;

/// The largest clip sent whole (a request without a range: `curl`, "save as"); a larger one
/// is refused with 413 and asked for in ranges.
pub(crate) const MAX_WHOLE: u64 = 256 << 20;

/// Rows `/api/clips` lists at most (the newest).
pub(crate) const LIST: u32 = 200;

/// `/api/clips`: the newest clips, each with its URL.
pub(super) fn list(dir: &Path) -> Reply {
    // The event clips: continuous segments, one a minute, would push them off the list.
    let rows = match zcpipe_clips::Index::open_read(dir).and_then(|ix| ix.list_kind(None, Some(Kind::Event), LIST)) {
        Ok(r) => r,
        Err(e) => return Reply::text(503, format!("no clips yet ({e:#})\n")),
    };
    let v: Vec<serde_json::Value> = rows
        .iter()
        .map(|c| {
            let mut o = serde_json::to_value(c).unwrap_or_default();
            o["url"] = format!("/clips/{}.mp4", c.id).into();
            // A thumbnail is made when its clip closes.
            if c.state != zcpipe_clips::State::Recording {
                o["thumbnail"] = format!("/clips/{}.jpg", c.id).into();
            }
            o
        })
        .collect();
    Reply::new(200, "application/json", serde_json::Value::Array(v).to_string().into_bytes())
}

/// `/clips/<id>.jpg`: an event clip's thumbnail (its picture at the event, made by the
/// recorder when the clip closed), whole.
fn thumbnail(dir: &Path, id: i64, head: bool) -> Reply {
    let path = match clip_file(dir, id) {
        Ok(p) => p.with_extension("jpg"),
        Err(r) => return r,
    };
    match std::fs::metadata(&path) {
        Ok(m) if m.len() <= MAX_THUMB => {}
        _ => return Reply::text(404, format!("clip {id} has no thumbnail\n")),
    }
    match std::fs::read(&path) {
        Ok(b) if head => Reply::new(200, "image/jpeg", vec![]).header("Content-Length", &b.len().to_string()),
        Ok(b) => Reply::new(200, "image/jpeg", b),
        Err(_) => Reply::text(404, format!("clip {id} has no thumbnail\n")),
    }
}

/// Clip `id`'s file in the record folder `dir`, by its row; only a plain relative path below
/// the folder (`CAMERA/NAME.mp4`). Errors: the answer (404: no such clip, or a path that
/// would leave the folder; 503: the index cannot be read).
fn clip_file(dir: &Path, id: i64) -> Result<std::path::PathBuf, Reply> {
    let row = match zcpipe_clips::Index::open_read(dir).and_then(|ix| ix.get(id)) {
        Ok(Some(r)) => r,
        Ok(None) => return Err(Reply::text(404, format!("no clip {id}\n"))),
        Err(e) => return Err(Reply::text(503, format!("the clips' index cannot be read ({e:#})\n"))),
    };
    let rel = Path::new(&row.path);
    if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(Reply::text(404, format!("no clip {id}\n")));
    }
    Ok(dir.join(rel))
}

/// The largest thumbnail served, bytes (one is a few tens of KB).
const MAX_THUMB: u64 = 1 << 20;

/// `/clips/<id>.mp4` (`rest`: what follows `/clips/`), the part `range` asks for; or
/// `/clips/<id>.jpg`, its thumbnail.
pub(super) fn file(dir: &Path, rest: &str, range: Option<&str>, head: bool) -> Reply {
    if let Some(id) = rest.strip_suffix(".jpg").and_then(|i| i.parse::<i64>().ok()) {
        return thumbnail(dir, id, head);
    }
    let Some(id) = rest.strip_suffix(".mp4").and_then(|i| i.parse::<i64>().ok()) else {
        return Reply::text(404, format!("not a clip: {rest}; clips are /clips/<id>.mp4 (ids in /api/clips)\n"));
    };
    let path = match clip_file(dir, id) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let Ok(mut f) = std::fs::File::open(path) else {
        return Reply::text(404, format!("clip {id}: its file is gone (removed by retention?)\n"));
    };
    let len = f.metadata().map_or(0, |m| m.len());
    // A range header that is not one byte range is ignored (RFC 9110 14.2); one past the
    // end is 416.
    let (start, end, partial) = match range.and_then(|r| parse_range(r, len)) {
        Some(Ranged::Bytes(a, b)) => (a, b.min(a + MAX_RANGE), true),
        Some(Ranged::Unsatisfiable) => {
            return Reply::text(416, format!("range {} is not in the clip's {len} bytes\n", range.unwrap_or("")))
                .header("Content-Range", &format!("bytes */{len}"));
        }
        None if len > MAX_WHOLE => {
            return Reply::text(
                413,
                format!("clip {id} is {len} bytes, more than is sent whole: ask for byte ranges (a browser's video player does)\n"),
            )
            .header("Accept-Ranges", "bytes");
        }
        None => (0, len, false),
    };
    let mut body = vec![0u8; if head { 0 } else { (end - start) as usize }];
    if !head && (f.seek(SeekFrom::Start(start)).is_err() || f.read_exact(&mut body).is_err()) {
        return Reply::text(500, format!("clip {id}: its file could not be read\n"));
    }
    let status = if partial { 206 } else { 200 };
    let mut r = Reply::new(status, "video/mp4", body).header("Accept-Ranges", "bytes");
    if head {
        // What a GET would carry (RFC 9110 9.3.2), the body left out.
        r = r.header("Content-Length", &(end - start).to_string());
    }
    // A clip being recorded grows: it is not cached.
    if partial {
        r = r.header("Content-Range", &format!("bytes {start}-{}/{len}", end.saturating_sub(1)));
    }
    r
}

/// What a `Range` header asks of a file.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ranged {
    /// The bytes `[start, end)`.
    Bytes(u64, u64),
    /// A range wholly past the file's end (416).
    Unsatisfiable,
}

/// One byte range of RFC 9110 (`bytes=A-B`, `bytes=A-`, `bytes=-N`) in a file of `len`
/// bytes; `None` for a header that is not one byte range (ignored, as the RFC says).
pub(crate) fn parse_range(h: &str, len: u64) -> Option<Ranged> {
    let spec = h.trim().strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (a, b) = spec.split_once('-')?;
    let (a, b) = (a.trim(), b.trim());
    let (start, end) = if a.is_empty() {
        let n: u64 = b.parse().ok()?;
        (len.saturating_sub(n), len)
    } else {
        let start: u64 = a.parse().ok()?;
        let last = if b.is_empty() { None } else { Some(b.parse::<u64>().ok()?) };
        if last.is_some_and(|l| l < start) {
            return None;
        }
        (start, last.map_or(len, |l| l.saturating_add(1).min(len)))
    };
    Some(if start < end && start < len { Ranged::Bytes(start, end) } else { Ranged::Unsatisfiable })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_read_as_rfc_9110_says() {
        use Ranged::*;
        assert_eq!(parse_range("bytes=0-99", 1000), Some(Bytes(0, 100)));
        assert_eq!(parse_range("bytes=900-", 1000), Some(Bytes(900, 1000)));
        assert_eq!(parse_range("bytes=-100", 1000), Some(Bytes(900, 1000)));
        assert_eq!(parse_range("bytes=990-5000", 1000), Some(Bytes(990, 1000)));
        assert_eq!(parse_range("bytes=1000-", 1000), Some(Unsatisfiable), "past the end");
        // Not one byte range: ignored.
        assert_eq!(parse_range("bytes=5-2", 1000), None);
        assert_eq!(parse_range("bytes=0-1,5-6", 1000), None);
        assert_eq!(parse_range("items=0-1", 1000), None);
        assert_eq!(parse_range("bytes=x-1", 1000), None);
    }

    #[test]
    fn a_clip_is_served_by_its_id_in_parts_and_nothing_outside_the_folder() {
        let d = tempfile::tempdir().unwrap();
        let (mut ix, _) = zcpipe_clips::Index::open(d.path()).unwrap();
        std::fs::create_dir(d.path().join("cam0")).unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        std::fs::write(d.path().join("cam0/a.mp4"), &data).unwrap();
        let new = |path| zcpipe_clips::NewClip {
            camera: "cam0",
            start_ms: 5,
            path,
            codec: "h264",
            size: (8, 8),
            kind: zcpipe_clips::Kind::Event,
        };
        let id = ix.open_clip(&new("cam0/a.mp4")).unwrap();
        let evil = ix.open_clip(&new("../secret.mp4")).unwrap();
        let whole = file(d.path(), &format!("{id}.mp4"), None, false);
        assert_eq!((whole.status, whole.body.len()), (200, 10_000));
        let part = file(d.path(), &format!("{id}.mp4"), Some("bytes=100-199"), false);
        assert_eq!((part.status, &part.body[..]), (206, &data[100..200]));
        assert!(part.headers.contains(&("Content-Range", "bytes 100-199/10000".to_string())), "{:?}", part.headers);
        let head = file(d.path(), &format!("{id}.mp4"), Some("bytes=100-199"), true);
        assert!(
            head.body.is_empty() && head.headers.contains(&("Content-Length", "100".to_string())),
            "{:?}",
            head.headers
        );
        let bad = file(d.path(), &format!("{id}.mp4"), Some("bytes=20000-"), false);
        assert_eq!(bad.status, 416);
        assert_eq!(file(d.path(), &format!("{evil}.mp4"), None, false).status, 404);
        assert_eq!(file(d.path(), "999.mp4", None, false).status, 404);
        assert_eq!(file(d.path(), "../../etc/passwd", None, false).status, 404);
        let l = list(d.path());
        let v: serde_json::Value = serde_json::from_slice(&l.body).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 2);
        assert!(v.as_array().unwrap().iter().any(|c| c["url"] == format!("/clips/{id}.mp4")), "{v}");
    }
}
