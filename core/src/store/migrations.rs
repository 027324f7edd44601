//! The schema's migrations, in order: D1 has them applied by wrangler, and each shard
//! applies them itself on its first call (`shard.rs`); the simulator and the store's
//! tests apply them to their SQLite.

/// The migration files, in order: the same ones `wrangler d1 migrations apply` runs.
pub const MIGRATIONS: &[(&str, &str)] = &[
    (
        "0001_jobs_attempts_events.sql",
        include_str!("../../../edge/migrations/0001_jobs_attempts_events.sql"),
    ),
    (
        "0002_certifications.sql",
        include_str!("../../../edge/migrations/0002_certifications.sql"),
    ),
    (
        "0003_fault_paths.sql",
        include_str!("../../../edge/migrations/0003_fault_paths.sql"),
    ),
    (
        "0004_one_rollup.sql",
        include_str!("../../../edge/migrations/0004_one_rollup.sql"),
    ),
    (
        "0005_lists.sql",
        include_str!("../../../edge/migrations/0005_lists.sql"),
    ),
    (
        "0006_stats.sql",
        include_str!("../../../edge/migrations/0006_stats.sql"),
    ),
    (
        "0007_one_position.sql",
        include_str!("../../../edge/migrations/0007_one_position.sql"),
    ),
    (
        "0008_attempt_tokens.sql",
        include_str!("../../../edge/migrations/0008_attempt_tokens.sql"),
    ),
];

#[cfg(test)]
mod tests {
    #[test]
    fn every_migration_file_is_applied_by_the_shards() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../edge/migrations");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".sql"))
            .collect();
        files.sort();
        let listed: Vec<String> = super::MIGRATIONS
            .iter()
            .map(|(n, _)| (*n).to_owned())
            .collect();
        assert!(!files.is_empty());
        assert_eq!(files, listed);
    }
}
