//! Structured log lines, one JSON object each: the log's two shells. In the Worker,
//! the runtime's console (what `wrangler tail` and the suites read); in the native
//! shell, a buffer the simulator drains after every step, to check that nothing paid
//! for is lost without a line.

use serde_json::Value;

/// A line about something that went as designed (`console.log`).
pub(crate) fn info(line: Value) {
    shell::write(false, line);
}

/// A line about a failure (`console.error`).
pub(crate) fn error(line: Value) {
    shell::write(true, line);
}

#[cfg(target_arch = "wasm32")]
mod shell {
    pub(super) fn write(error: bool, line: serde_json::Value) {
        if error {
            worker::console_error!("{line}");
        } else {
            worker::console_log!("{line}");
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod shell {
    use serde_json::Value;
    use std::cell::RefCell;

    thread_local! {
        static LINES: RefCell<Vec<Value>> = const { RefCell::new(Vec::new()) };
    }

    pub(super) fn write(_error: bool, line: Value) {
        LINES.with(|lines| lines.borrow_mut().push(line));
    }

    /// The lines written since the last call.
    pub(crate) fn drain() -> Vec<Value> {
        LINES.with(|lines| std::mem::take(&mut *lines.borrow_mut()))
    }
}

#[cfg(not(target_arch = "wasm32"))]
pub(crate) use shell::drain;
