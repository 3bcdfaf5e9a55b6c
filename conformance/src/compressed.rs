//! Reading report files that may be gzipped.
//!
//! Large committed reports (`results.json`, `differential.json`) are stored
//! gzipped as `NAME.json.gz`; every command that reads a report takes
//! either form.

use std::io::Read;
use std::path::{Path, PathBuf};

/// The two bytes every gzip stream starts with (RFC 1952).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Read `path` as UTF-8 text, decompressing it when it is gzipped (told by
/// its first bytes, not its name), with the results-file limit
/// (`limits::MAX_RESULTS_BYTES`) on both the stored and the
/// decompressed size. A `path` that does not exist is read from `path.gz`
/// when that exists, so a report's usual name finds its compressed copy.
/// Errors are I/O errors: the caller names the file.
pub fn read_to_string(path: &Path) -> std::io::Result<String> {
    read_to_string_bounded(path, crate::limits::MAX_RESULTS_BYTES, "a report file")
}

/// [`read_to_string`] with its own limit: `what` names the input in the
/// error, and a gzip stream that inflates past `limit` is refused rather
/// than read (a small file must not become gigabytes in memory).
pub fn read_to_string_bounded(path: &Path, limit: u64, what: &str) -> std::io::Result<String> {
    let bytes = match crate::safe_fs::read_bounded(path, limit, what) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            crate::safe_fs::read_bounded(&gz_sibling(path), limit, what).map_err(|_| e)?
        }
        other => other?,
    };
    text_of(bytes, limit, what)
}

/// `bytes` as UTF-8 text, inflated first when they are gzipped: every
/// member of the stream (`cat a.gz b.gz`, or a file gzipped in parts, is
/// one text: reading only the first member would lose the rest without a
/// word), at most `limit` bytes in all.
pub fn text_of(bytes: Vec<u8>, limit: u64, what: &str) -> std::io::Result<String> {
    if !bytes.starts_with(&GZIP_MAGIC) {
        return String::from_utf8(bytes)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e));
    }
    let mut text = String::new();
    flate2::read::MultiGzDecoder::new(&bytes[..])
        .take(limit + 1)
        .read_to_string(&mut text)
        .map_err(|e| std::io::Error::new(e.kind(), format!("not gzipped UTF-8 text: {e}")))?;
    if text.len() as u64 > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("decompresses past the limit of {limit} bytes for {what}"),
        ));
    }
    Ok(text)
}

/// `path` with `.gz` appended to its file name.
fn gz_sibling(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".gz");
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::{write::GzEncoder, Compression};
    use std::io::Write;

    fn gzip(text: &str) -> Vec<u8> {
        let mut enc = GzEncoder::new(Vec::new(), Compression::default());
        enc.write_all(text.as_bytes()).unwrap();
        enc.finish().unwrap()
    }

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("ipc-compressed-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn plain_and_gzipped_files_read_the_same() {
        let dir = scratch("both");
        let text = "{\"schema_version\": 1}\n";
        std::fs::write(dir.join("plain.json"), text).unwrap();
        std::fs::write(dir.join("packed.json.gz"), gzip(text)).unwrap();
        assert_eq!(read_to_string(&dir.join("plain.json")).unwrap(), text);
        assert_eq!(read_to_string(&dir.join("packed.json.gz")).unwrap(), text);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_file_is_read_from_its_gz_copy() {
        let dir = scratch("sibling");
        std::fs::write(dir.join("results.json.gz"), gzip("[1, 2]")).unwrap();
        assert_eq!(read_to_string(&dir.join("results.json")).unwrap(), "[1, 2]");
        let missing = read_to_string(&dir.join("absent.json")).unwrap_err();
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_gzip_stream_that_inflates_past_the_limit_is_refused() {
        let dir = scratch("bomb");
        std::fs::write(dir.join("big.json.gz"), gzip(&"x".repeat(100_000))).unwrap();
        let err =
            read_to_string_bounded(&dir.join("big.json.gz"), 10_000, "a test file").unwrap_err();
        assert!(err.to_string().contains("limit of 10000 bytes"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_member_of_a_multi_member_gzip_is_read() {
        let dir = scratch("members");
        let mut packed = gzip("line 1\nline 2\n");
        packed.extend(gzip("line 3\n"));
        packed.extend(gzip(""));
        packed.extend(gzip("line 4\n"));
        std::fs::write(dir.join("joined.jsonl.gz"), &packed).unwrap();
        assert_eq!(
            read_to_string(&dir.join("joined.jsonl.gz")).unwrap(),
            "line 1\nline 2\nline 3\nline 4\n"
        );
        // The limit holds for all members together.
        let err =
            read_to_string_bounded(&dir.join("joined.jsonl.gz"), 20, "a test file").unwrap_err();
        assert!(err.to_string().contains("limit of 20 bytes"), "{err}");
        // Garbage after the last member is an error, not dropped.
        packed.extend(b"trailing");
        std::fs::write(dir.join("joined.jsonl.gz"), &packed).unwrap();
        assert!(read_to_string(&dir.join("joined.jsonl.gz")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_truncated_gzip_stream_is_an_error_not_a_panic() {
        let dir = scratch("truncated");
        let packed = gzip(&"x".repeat(10_000));
        std::fs::write(dir.join("cut.json.gz"), &packed[..packed.len() / 2]).unwrap();
        let err = read_to_string(&dir.join("cut.json.gz")).unwrap_err();
        assert!(err.to_string().contains("not gzipped UTF-8 text"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
