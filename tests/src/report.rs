//! Figures of the reliability suites. Each suite writes one JSON file into
//! `ONCECLICK_REPORT_DIR` (`target/reliability` under `cargo xtask test`); xtask prints a
//! line per suite from them, and RELIABILITY.md quotes a run.

use serde_json::Value;

/// Writes `figures` (a JSON object) as the report of `suite`; also prints it, so that
/// `cargo test -- --nocapture` shows it without xtask.
pub fn write(suite: &str, figures: &Value) {
    println!("reliability {suite}: {figures}");
    let Ok(dir) = std::env::var("ONCECLICK_REPORT_DIR") else {
        return;
    };
    let dir = std::path::Path::new(&dir);
    if std::fs::create_dir_all(dir).is_ok() {
        let text = serde_json::to_string_pretty(figures).unwrap_or_default();
        let _ = std::fs::write(dir.join(format!("{suite}.json")), text);
    }
}
