//! `GET /v1/move` (admin): during a move (`PREVIOUS_STORE`), what the layout it leaves
//! still holds, summed over its places (one subrequest each), and whether it may go (see
//! `onceclick_protocol::moving`). `cargo xtask move-status` asks the same question of a
//! D1 directly, and of local shards' files.

use crate::error::{ApiResult, AppError};
use crate::http::{json, Ctx};
use serde_json::json;
use worker::{Headers, Response};

pub(crate) async fn get(ctx: &Ctx<'_>) -> ApiResult<Response> {
    let (previous, places, status) = ctx.store.previous_store_status().await?.ok_or_else(|| {
        AppError::new(
            onceclick_protocol::ErrorCode::NotFound,
            "no move is in progress: this deployment keeps no PREVIOUS_STORE",
        )
    })?;
    let body = json!({
        "previous_store": previous.to_string(),
        "current_store": ctx.store.now().map(|now| now.to_string()),
        "places": places,
        "jobs": status.jobs,
        "unknown": status.unknown,
        "open": status.open,
        "last_updated_at": status.last_updated_at,
        "previous_may_go": status.previous_may_go(),
        "verdict": status.verdict(previous),
    });
    let headers = Headers::new();
    headers
        .set("Cache-Control", "no-store")
        .map_err(crate::problem::runtime)?;
    json(200, body.to_string(), headers)
}
