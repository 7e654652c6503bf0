//! Binary sa files through the machine's `sadf`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::SADF_ACTIVITIES;
use std::sync::atomic::{AtomicU64, Ordering};

/// A folder for sadf's output, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> std::io::Result<TempDir> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("kahuna-sadf-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The `sadf -dh` text of a binary sa file, in a temporary file.
pub struct Converted {
    /// Removed with this value, and the text in it.
    _dir: TempDir,
    text: PathBuf,
    /// Set when sadf stopped at a record cut short (a file being written, or damaged at its
    /// end): the complete records before it are read, and the report says so.
    pub warning: Option<String>,
}

impl Converted {
    pub fn text_path(&self) -> &Path {
        &self.text
    }
}

const CUT_SHORT: &str = "End of system activity file unexpected";

/// Runs `sadf -dh` over a binary sa file; a file of an older format generation is converted
/// with `sadf -c` first. Errors carry sadf's own words.
pub fn convert(path: &Path) -> Result<Converted, String> {
    let dir = TempDir::new().map_err(|e| format!("cannot create a temporary folder: {e}"))?;
    let text = dir.0.join("sadf.txt");
    let warning = match run_sadf(path, &text) {
        Ok(warning) => warning,
        Err(reason) if reason.contains("convert") => {
            let upgraded = dir.0.join("converted.sa");
            let file =
                std::fs::File::create(&upgraded).map_err(|e| format!("cannot write {}: {e}", upgraded.display()))?;
            let out = Command::new("sadf")
                .arg("-c")
                .arg(path)
                .stdout(file)
                .stderr(Stdio::piped())
                .output()
                .map_err(sadf_missing)?;
            if !out.status.success() {
                return Err(format!("sadf -c cannot convert it: {}", words(&out.stderr)));
            }
            run_sadf(&upgraded, &text).map_err(|e| format!("after sadf -c: {e}"))?
        }
        Err(reason) => return Err(reason),
    };
    Ok(Converted { _dir: dir, text, warning })
}

fn run_sadf(path: &Path, text: &Path) -> Result<Option<String>, String> {
    let file = std::fs::File::create(text).map_err(|e| format!("cannot write {}: {e}", text.display()))?;
    let out = Command::new("sadf")
        .arg("-dh")
        .arg(path)
        .arg("--")
        .args(SADF_ACTIVITIES)
        .stdout(file)
        .stderr(Stdio::piped())
        .output()
        .map_err(sadf_missing)?;
    let said = words(&out.stderr);
    if out.status.success() {
        Ok(None)
    } else if said.contains(CUT_SHORT) {
        Ok(Some(format!("sadf: {CUT_SHORT}; the complete records before it were read")))
    } else {
        Err(format!("sadf cannot read it: {said}"))
    }
}

fn sadf_missing(e: std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::NotFound {
        "binary sa file, and `sadf` is not installed: install sysstat (`apt-get install sysstat`)".into()
    } else {
        format!("cannot run sadf: {e}")
    }
}

/// sadf's message on one line: its lines joined, the blank ones and the advice left out.
fn words(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    if lines.is_empty() { "no message".into() } else { lines.join("; ") }
}
