//! Certification reports: which provider passed which kind's contract, and as what.

use super::{bind_flag, bind_text, json_text, sql, Op, Route, Store};
use crate::error::{ApiResult, AppError};
use serde::Deserialize;
use serde_json::Value;

/// One certification report: a provider against one contract version of a kind.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Certification {
    pub provider: String,
    pub kind: String,
    pub contract_version: String,
    /// What was certified: the provider's model and base URL, as a digest.
    pub provider_digest: String,
    pub passed: bool,
    /// `[{input, code, message}]`: which golden input failed, and how.
    pub failures: Vec<Value>,
    pub certified_at: String,
}

impl Store {
    /// Stores a certification report, replacing an earlier one for the same provider,
    /// kind and contract version.
    ///
    /// Sharded, every shard keeps a copy (the failover guard reads its own shard's), and
    /// the report is written to all of them; the write is safe to repeat, so a
    /// certification that failed on some shard is run again.
    pub async fn save_certification(&self, report: &Certification) -> ApiResult<()> {
        let failures = json_text(&report.failures)?;
        let stmt = || {
            Ok(vec![self.stmt(
                sql::SAVE_CERTIFICATION,
                &[
                    bind_text(&report.provider),
                    bind_text(&report.kind),
                    bind_text(&report.contract_version),
                    bind_flag(report.passed),
                    bind_text(&failures),
                    bind_text(&report.certified_at),
                    bind_text(&report.provider_digest),
                ],
            )?])
        };
        self.exec_everywhere(Op::SaveCertification, stmt).await?;
        Ok(())
    }

    /// Every stored certification report (for the current and older contract versions),
    /// as the place `route` names holds them: a job's own shard (or the D1 it lives in)
    /// for the dispatcher's failover and hedge decisions, so that they read the same copy
    /// as that place's SQL guard; any place for a read that belongs to no job.
    /// (Boxed: it is awaited from the core and from the Worker's shell, which would each
    /// compile a copy of an `async fn`.)
    pub fn certifications<'a>(
        &'a self,
        route: Route<'a>,
    ) -> futures_util::future::LocalBoxFuture<'a, ApiResult<Vec<Certification>>> {
        Box::pin(self.read_certifications(route))
    }

    async fn read_certifications(&self, route: Route<'_>) -> ApiResult<Vec<Certification>> {
        #[derive(Deserialize)]
        struct Row {
            provider: String,
            kind: String,
            contract_version: String,
            provider_digest: String,
            passed: u32,
            failures: String,
            certified_at: String,
        }
        let stmt = self.stmt(sql::CERTIFICATIONS, &[])?;
        self.one(Op::Certifications, route, stmt)
            .await?
            .results::<Row>()?
            .into_iter()
            .map(|r| {
                Ok(Certification {
                    provider: r.provider,
                    kind: r.kind,
                    contract_version: r.contract_version,
                    provider_digest: r.provider_digest,
                    passed: r.passed != 0,
                    failures: serde_json::from_str(&r.failures).map_err(AppError::internal)?,
                    certified_at: r.certified_at,
                })
            })
            .collect()
    }
}
