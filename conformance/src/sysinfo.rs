//! Facts about the run for reports: time stamps, host name, git revision.
//! Plain std, no date or system crates.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

/// Environment variable that overrides the recorded git revision.
pub const GIT_REVISION_ENV: &str = "IPC_GIT_REVISION";

/// `SystemTime` as RFC 3339 in UTC with millisecond precision:
/// `2026-11-01T12:34:56.789Z`. Times before 1970 clamp to the epoch.
pub fn rfc3339_utc(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let millis = d.subsec_millis();
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, day) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian
/// calendar (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The host name, from the kernel, `$HOSTNAME` or `/etc/hostname`.
pub fn hostname() -> Option<String> {
    let from_file = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    from_file("/proc/sys/kernel/hostname")
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .or_else(|| from_file("/etc/hostname"))
}

/// `$IPC_GIT_REVISION`, else the revision the binary was built from (see
/// `build.rs`), else `git rev-parse HEAD` in the source tree or the current
/// directory, else `None`.
pub fn git_revision() -> Option<String> {
    if let Ok(rev) = std::env::var(GIT_REVISION_ENV) {
        let rev = rev.trim().to_string();
        if !rev.is_empty() {
            return Some(rev);
        }
    }
    if let Some(rev) = option_env!("IPC_BUILD_GIT_REVISION") {
        return Some(rev.to_string());
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = if manifest.is_dir() {
        manifest.to_path_buf()
    } else {
        std::env::current_dir().ok()?
    };
    let out = Command::new("git")
        .arg("-C")
        .arg(&dir)
        .args(["rev-parse", "HEAD"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let rev = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!rev.is_empty()).then_some(rev)
}

/// Milliseconds with microsecond resolution, for `duration_ms` fields.
pub fn millis(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1_000_000.0).round() / 1000.0
}

/// `0.1 ms`, `12.3 ms`, `1.25 s`, `2 min 3 s`.
pub fn human_ms(ms: f64) -> String {
    if ms < 1000.0 {
        format!("{ms:.1} ms")
    } else if ms < 120_000.0 {
        format!("{:.2} s", ms / 1000.0)
    } else {
        let s = (ms / 1000.0).round() as u64;
        format!("{} min {} s", s / 60, s % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rfc3339_known_instants() {
        assert_eq!(rfc3339_utc(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        // 2000-02-29T12:00:00Z (leap day)
        assert_eq!(
            rfc3339_utc(UNIX_EPOCH + Duration::from_secs(951_825_600)),
            "2000-02-29T12:00:00.000Z"
        );
        // 2026-11-01T03:57:44.250Z
        assert_eq!(
            rfc3339_utc(UNIX_EPOCH + Duration::from_millis(1_793_505_464_250)),
            "2026-11-01T03:57:44.250Z"
        );
        assert_eq!(
            rfc3339_utc(UNIX_EPOCH + Duration::from_secs(4_102_444_799)),
            "2099-12-31T23:59:59.000Z"
        );
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(human_ms(0.123), "0.1 ms");
        assert_eq!(human_ms(1500.0), "1.50 s");
        assert_eq!(human_ms(183_000.0), "3 min 3 s");
        assert_eq!(millis(Duration::from_micros(1234)), 1.234);
    }

    #[test]
    fn git_revision_is_absent_or_non_empty() {
        // The override is checked by tests/cli.rs (a child process with
        // IPC_GIT_REVISION set); here, whatever git says is well formed.
        if let Some(rev) = git_revision() {
            assert!(!rev.is_empty());
        }
    }
}
