//! The world as the platform its hosts run on: `World`'s side of [`Platform`], each
//! method the world's own. In a file above both so that the host stays below the world.

use crate::exec::Exec;
use crate::host::Platform;
use crate::live::Live;
use crate::script::{Script, StreamEnd};
use crate::world::World;
use onceclick_core::message::Dispatch;
use onceclick_core::outcome::CallOutcome;
use onceclick_protocol::contract::Kind;
use serde_json::Value;
use std::rc::Rc;

impl Platform for World {
    fn config(&self) -> Rc<onceclick_core::config::Config> {
        self.config.borrow().clone()
    }

    fn exec(&self) -> &Rc<Exec> {
        &self.exec
    }

    fn send(&self, dispatch: Dispatch) -> Result<(), String> {
        World::send(self, dispatch)
    }

    fn provider_call(&self, attempt_id: &str, provider: &str, timeout: u64) -> (Script, u64) {
        World::provider_call(self, attempt_id, provider, timeout)
    }

    fn text_came(&self, attempt_id: &str) {
        World::text_came(self, attempt_id);
    }

    fn delivered(&self, attempt_id: &str, due: u64) {
        World::delivered(self, attempt_id, due);
    }

    fn stopped(&self, attempt_id: &str) {
        World::stopped(self, attempt_id);
    }

    fn check_streamed(
        &self,
        attempt_id: &str,
        end: StreamEnd,
        expected: &Value,
        chars: u64,
        outcome: &CallOutcome,
    ) {
        World::check_streamed(self, attempt_id, end, expected, chars, outcome);
    }

    fn answered(&self, attempt_id: &str, outcome: &CallOutcome) {
        World::answered(self, attempt_id, outcome);
    }

    fn output(&self, n: u64, kind: &Kind, input: &Value) -> Value {
        World::output(self, n, kind, input)
    }

    fn streamed_output(&self, n: u64, kind: &Kind, input: &Value) -> Value {
        World::streamed_output(self, n, kind, input)
    }

    fn serial(&self) -> u64 {
        World::serial(self)
    }

    fn below(&self, n: u64) -> u64 {
        World::below(self, n)
    }

    fn live(&self) -> &Live {
        World::live(self)
    }
}
