//! `GET /v1/move` (admin): while a sharded deployment keeps the D1 it moved from
//! (`PREVIOUS_STORE`), what D1 still holds, and whether it may go (see
//! `onceclick_protocol::moving`). `cargo xtask move-status` asks D1 the same question
//! directly, for when this deployment no longer binds it.

use crate::error::{ApiResult, AppError};
use crate::http::{json, Ctx};
use serde_json::json;
use worker::{Headers, Response};

pub(crate) async fn get(ctx: &Ctx<'_>) -> ApiResult<Response> {
    let status = ctx.store.previous_store_status().await?.ok_or_else(|| {
        AppError::new(
            onceclick_protocol::ErrorCode::NotFound,
            "no move is in progress: this deployment keeps no PREVIOUS_STORE",
        )
    })?;
    let body = json!({
        "previous_store": "d1",
        "jobs": status.jobs,
        "unknown": status.unknown,
        "open": status.open,
        "last_updated_at": status.last_updated_at,
        "previous_may_go": status.previous_may_go(),
        "verdict": status.verdict(),
    });
    let headers = Headers::new();
    headers
        .set("Cache-Control", "no-store")
        .map_err(crate::problem::runtime)?;
    json(200, body.to_string(), headers)
}
