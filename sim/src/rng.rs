//! The one source of chance: a seeded splitmix64. Every choice of a run comes from its
//! seed, so a run replays exactly.

#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 for `n = 0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// True with the chance `per_million` / 1,000,000.
    pub(crate) fn chance(&mut self, per_million: u32) -> bool {
        per_million > 0 && self.below(1_000_000) < u64::from(per_million)
    }

    /// One of `items`, by weight.
    pub(crate) fn weighted<T: Copy>(&mut self, items: &[(u32, T)]) -> T {
        let total: u64 = items.iter().map(|(w, _)| u64::from(*w)).sum();
        let mut pick = self.below(total);
        for (w, item) in items {
            if pick < u64::from(*w) {
                return *item;
            }
            pick -= u64::from(*w);
        }
        items[items.len() - 1].1
    }

    /// A seed for a part of a run, from this seed and `index`: the parts' choices stay
    /// the same when another part is left out (what shrinking relies on).
    pub(crate) fn derive(seed: u64, index: u64) -> u64 {
        Rng::new(seed ^ index.wrapping_mul(0xA24B_AED4_963E_E407)).next_u64()
    }
}
