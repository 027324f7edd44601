//! Where a job lives when the store is split into shards (the Durable Objects backend).
//!
//! A job lives in the shard that its (owner, key) hashes to, and its id (and each of its
//! attempts' ids) carries that shard, so that everything after the create routes from
//! the id alone, with no lookup:
//!
//! - [`shard_for_key`]: SHA-256 of the owner's length, the owner and the key, read as a
//!   big-endian `u64`, modulo the shard count. A pure function of (owner, key, count):
//!   the same pair always names the same shard for as long as the count is the same.
//! - [`sharded_id`]: a UUIDv7 made into a UUIDv8 (RFC 9562 §5.8, "custom") that keeps
//!   the v7's 48-bit millisecond prefix (ids still sort by creation) and puts the shard
//!   in its last 16 bits: 4 bits of log2(count), 12 bits of the shard's number. An id
//!   therefore names its shard *and* the shard count it was made under, so a job made
//!   under another count still routes to where it is.
//! - [`route_of_id`]: reads that back. A UUIDv7 id is a job of the single-database (D1)
//!   backend.
//!
//! Why a key can never be in two shards: the create is the only write that binds a key,
//! and it goes to `shard_for_key(owner, key, count)`, where `UNIQUE(owner_id,
//! idempotency_key)` decides in one transaction. With a fixed count that is one shard. A
//! deployment that changes the count (or moves from D1) keeps answering the keys of the
//! previous layout from there until it holds no job (`PREVIOUS_STORE`, `moving.rs`):
//! see README.md, "Changing the number of shards".

use sha2::{Digest, Sha256};

/// The most shards a deployment may have: 12 bits of the id hold the shard's number.
pub const MAX_SHARDS: u32 = 1 << 12;

/// A shard count: a power of two from 1 to [`MAX_SHARDS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardCount(u32);

impl ShardCount {
    /// `count` if it is a power of two no larger than [`MAX_SHARDS`].
    pub fn new(count: u32) -> Option<Self> {
        (count.is_power_of_two() && count <= MAX_SHARDS).then_some(Self(count))
    }

    /// How many shards.
    pub fn get(self) -> u32 {
        self.0
    }

    fn log2(self) -> u32 {
        self.0.trailing_zeros()
    }
}

/// One shard: its number under a count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// The shard count the job was made under.
    pub count: ShardCount,
    /// The shard's number, below `count`.
    pub index: u32,
}

impl Shard {
    /// The name of the shard's object: `s<count>.<index>`. The count is in the name, so
    /// a deployment with another count never writes into this one's objects.
    pub fn object_name(self) -> String {
        format!("s{}.{}", self.count.get(), self.index)
    }
}

/// The shard that (owner, key) belongs to under `count`.
pub fn shard_for_key(owner: &str, key: &str, count: ShardCount) -> Shard {
    let mut hash = Sha256::new();
    // The owner's length first, so that ("ab", "c") and ("a", "bc") differ.
    hash.update((owner.len() as u64).to_be_bytes());
    hash.update(owner.as_bytes());
    hash.update(key.as_bytes());
    let digest = hash.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    let index = (u64::from_be_bytes(first) % u64::from(count.get())) as u32;
    Shard { count, index }
}

/// `prefix_<uuid>` with the UUIDv7 `v7` (as `uuid` writes it, lowercase, hyphenated)
/// turned into a UUIDv8 that names `shard`. `None` if `v7` is not such a text.
pub fn sharded_id(prefix: &str, v7: &str, shard: Shard) -> Option<String> {
    let bytes = v7.as_bytes();
    if bytes.len() != 36 || bytes[14] != b'7' {
        return None;
    }
    let tail = (shard.count.log2() << 12) | shard.index;
    Some(format!(
        "{prefix}_{}8{}{:04x}",
        &v7[..14],
        &v7[15..32],
        tail
    ))
}

/// Where an id's job lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdRoute {
    /// A UUIDv7: the single-database (D1) backend's.
    Database,
    /// A UUIDv8 of [`sharded_id`].
    Shard(Shard),
    /// Not an id this service made: it names no job anywhere.
    Unknown,
}

/// Reads where `id` (`job_…`, `att_…`) lives.
pub fn route_of_id(id: &str) -> IdRoute {
    let Some((_, uuid)) = id.split_once('_') else {
        return IdRoute::Unknown;
    };
    let bytes = uuid.as_bytes();
    let hex = |s: &[u8]| {
        s.iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    };
    let well_formed = bytes.len() == 36
        && [8, 13, 18, 23].iter().all(|&i| bytes[i] == b'-')
        && bytes
            .iter()
            .enumerate()
            .all(|(i, b)| [8, 13, 18, 23].contains(&i) || hex(&[*b]));
    if !well_formed {
        return IdRoute::Unknown;
    }
    match bytes[14] {
        b'7' => IdRoute::Database,
        b'8' => {
            let Ok(tail) = u32::from_str_radix(&uuid[32..], 16) else {
                return IdRoute::Unknown;
            };
            let (log2, index) = (tail >> 12, tail & 0xfff);
            match ShardCount::new(1 << log2) {
                Some(count) if index < count.get() => IdRoute::Shard(Shard { count, index }),
                _ => IdRoute::Unknown,
            }
        }
        _ => IdRoute::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V7: &str = "0192f0c4-7b1e-7c3d-9a4b-0123456789ab";

    fn count(n: u32) -> ShardCount {
        ShardCount::new(n).expect("a valid count")
    }

    #[test]
    fn counts_are_powers_of_two_up_to_the_id_space() {
        for n in [1, 2, 8, 256, 4096] {
            assert_eq!(ShardCount::new(n).map(ShardCount::get), Some(n));
        }
        for n in [0, 3, 12, 4097, 8192, u32::MAX] {
            assert_eq!(ShardCount::new(n), None, "{n}");
        }
    }

    #[test]
    fn an_id_routes_back_to_its_shard_for_every_count() {
        for log2 in 0..=12 {
            let c = count(1 << log2);
            for index in [0, c.get() / 2, c.get() - 1] {
                let shard = Shard { count: c, index };
                let id = sharded_id("job", V7, shard).expect("a v7 text");
                assert_eq!(id.len(), "job_".len() + 36);
                assert_eq!(route_of_id(&id), IdRoute::Shard(shard), "{id}");
                // The time prefix is kept: sharded ids sort by creation like v7 ones.
                assert_eq!(&id[4..18], &V7[..14]);
            }
        }
    }

    #[test]
    fn v7_ids_are_the_database_backend_and_anything_else_is_nobody() {
        assert_eq!(route_of_id(&format!("job_{V7}")), IdRoute::Database);
        assert_eq!(route_of_id(&format!("att_{V7}")), IdRoute::Database);
        for bad in [
            "job_1",
            "nope",
            "job_0192f0c4-7b1e-6c3d-9a4b-0123456789ab",
            "job_0192f0c4-7b1e-8c3d-9a4b-01234567d000",
            "job_0192F0C4-7b1e-8c3d-9a4b-012345670000",
            "job_0192f0c4-7b1e-8c3d-9a4b-0123456789ab-",
            "job_0192f0c4x7b1e-8c3d-9a4b-012345670000",
        ] {
            assert_eq!(route_of_id(bad), IdRoute::Unknown, "{bad}");
        }
        assert_eq!(
            sharded_id(
                "job",
                "not-a-uuid",
                Shard {
                    count: count(8),
                    index: 1
                }
            ),
            None
        );
    }

    #[test]
    fn keys_spread_over_every_shard_and_stay_where_they_hash() {
        let c = count(8);
        let mut seen = [0u32; 8];
        for i in 0..800 {
            let shard = shard_for_key("owner", &format!("key-{i}"), c);
            assert_eq!(shard, shard_for_key("owner", &format!("key-{i}"), c));
            seen[shard.index as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 60), "uneven spread: {seen:?}");
        // The owner's length is hashed, so moving a character across the line moves
        // the pair (for this pair; a collision would be a 1-in-8 chance otherwise).
        assert_ne!(
            shard_for_key("ab", "c", count(4096)),
            shard_for_key("a", "bc", count(4096))
        );
    }

    #[test]
    fn object_names_carry_the_count() {
        assert_eq!(
            Shard {
                count: count(8),
                index: 3
            }
            .object_name(),
            "s8.3"
        );
    }
}
