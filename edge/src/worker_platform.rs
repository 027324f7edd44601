//! The Worker's platform (`platform.rs`): the runtime's clock (which advances only
//! across I/O, all we need), `Math.random`, `uuid`'s own v7 (through `getrandom`), and
//! the console (what `wrangler tail` and the suites read).

use crate::platform::Platform;
use serde_json::Value;
use worker::js_sys::{Date, Math};

pub(crate) struct WorkerPlatform;

impl Platform for WorkerPlatform {
    fn now_ms(&self) -> f64 {
        Date::now()
    }

    fn rfc3339(&self, ms: f64) -> String {
        String::from(Date::new(&ms.into()).to_iso_string())
    }

    fn uuid_v7(&self) -> String {
        uuid::Uuid::now_v7().to_string()
    }

    fn random_below(&self, n: u32) -> u32 {
        ((Math::random() * f64::from(n)) as u32).min(n.saturating_sub(1))
    }

    fn log(&self, error: bool, line: Value) {
        if error {
            worker::console_error!("{line}");
        } else {
            worker::console_log!("{line}");
        }
    }
}
