//! What the Worker under test printed (`wrangler dev`'s output, which `cargo xtask test`
//! names in `ONCECLICK_WRANGLER_LOG`): tests read its structured lines to prove that an
//! injected fault really fired, instead of trusting that it did.

/// Whether the log has a `fault_fired` line for `op` at `when` (`before`/`after`) on
/// behalf of `scope` (an attempt id, or a request path).
pub fn fault_fired(op: &str, when: &str, scope: &str) -> bool {
    text().lines().any(|line| {
        line.contains("\"event\":\"fault_fired\"")
            && line.contains(&format!("\"op\":\"{op}\""))
            && line.contains(&format!("\"when\":\"{when}\""))
            && line.contains(&format!("\"scope\":\"{scope}\""))
    })
}

/// How many `fault_fired` lines the log has for `op` on behalf of `scope`.
pub fn faults_fired(op: &str, scope: &str) -> usize {
    text()
        .lines()
        .filter(|line| {
            line.contains("\"event\":\"fault_fired\"")
                && line.contains(&format!("\"op\":\"{op}\""))
                && line.contains(&format!("\"scope\":\"{scope}\""))
        })
        .count()
}

/// Waits (at most 10 s) until [`fault_fired`] holds; false if it never does. The line is
/// written before the effect a test observes, but may reach the file a little later.
pub async fn wait_fault_fired(op: &str, when: &str, scope: &str) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !fault_fired(op, when, scope) {
        if std::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    true
}

/// The Worker's log as written so far.
fn text() -> String {
    let path = std::env::var("ONCECLICK_WRANGLER_LOG")
        .expect("ONCECLICK_WRANGLER_LOG is not set: run with `cargo xtask test`");
    std::fs::read_to_string(&path).unwrap_or_default()
}

/// The structured lines of the event `event` (`{"event": …, …}`, whatever precedes or
/// follows the JSON on its line), in the order logged.
pub fn events(event: &str) -> Vec<serde_json::Value> {
    let marker = format!("\"event\":\"{event}\"");
    text()
        .lines()
        .filter(|line| line.contains(&marker))
        // An error line is coloured: escapes before and after its JSON.
        .filter_map(|line| serde_json::from_str(line.get(line.find('{')?..=line.rfind('}')?)?).ok())
        .filter(|v: &serde_json::Value| v["event"] == event)
        .collect()
}

/// Waits (at most `seconds`) for a line of the event `event` that `matches`, and returns
/// the first such; `None` if none came. A line is written before the effect a test
/// observes, but may reach the file a little later.
pub async fn wait_event(
    event: &str,
    seconds: u64,
    matches: impl Fn(&serde_json::Value) -> bool,
) -> Option<serde_json::Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    loop {
        if let Some(found) = events(event).into_iter().find(&matches) {
            return Some(found);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// The store calls the Worker made on behalf of `scope` (an attempt id for the queue
/// consumer, a request path for a request), as `(op, place)` pairs in the order logged:
/// the `store_call` lines of a Worker started with `LOG_STORE_CALLS=true`.
pub fn store_calls(scope: &str) -> Vec<(String, String)> {
    events("store_call")
        .into_iter()
        .filter(|v| v["scope"] == scope)
        .map(|v| {
            let text = |name: &str| v[name].as_str().unwrap_or_default().to_owned();
            (text("op"), text("place"))
        })
        .collect()
}
