//! Scheduling decisions, apart from the model: which slot a request gets, how waiting prompts
//! group into prefill calls, and the sizes (buckets) each call runs at.
//!
//! Continuous batching: between two decode steps, finished and cancelled requests leave their
//! slots and waiting requests take them (lowest slot first), so a request never waits for
//! another to finish beyond a free slot. New prompts are prefilled before the next decode step,
//! grouped in arrival order into calls of at most `token_budget` padded tokens, so a burst of
//! short prompts costs a few calls rather than one each.
//!
//! Every call runs at sizes from the manifest's buckets: rows (the batch), tokens per row
//! (prompt buckets; 1 when decoding) and attended positions (window buckets), so the server
//! compiles one program per bucket combination it meets (see [`program_count`]).

use std::collections::BTreeSet;

/// The sizes the step program is run at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buckets {
    /// Rows per call.
    pub batch: Vec<usize>,
    /// Tokens per row of a prefill.
    pub prompt: Vec<usize>,
    /// Key positions attended.
    pub window: Vec<usize>,
}

/// The smallest bucket holding `size`.
pub fn bucket(buckets: &[usize], size: usize) -> Option<usize> {
    buckets.iter().copied().find(|&bucket| bucket >= size)
}

/// One prefill call: the waiting requests `start..end` (in arrival order), at `rows` rows of
/// `steps` tokens attending `window` positions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefillGroup {
    /// First request of the group, as an index into the lengths given.
    pub start: usize,
    /// One past its last.
    pub end: usize,
    /// The batch bucket.
    pub rows: usize,
    /// The prompt bucket.
    pub steps: usize,
    /// The window bucket.
    pub window: usize,
}

/// Groups prompts of `lengths` tokens (each in `1..=max prompt bucket`) into prefill calls of at
/// most `token_budget` padded tokens (`rows * steps`; a prompt longer than the budget goes
/// alone) and at most `max_rows` rows.
pub fn prefill_groups(lengths: &[usize], buckets: &Buckets, token_budget: usize, max_rows: usize) -> Vec<PrefillGroup> {
    let mut groups: Vec<PrefillGroup> = Vec::new();
    let mut start = 0;
    while start < lengths.len() {
        let mut longest = 0;
        let mut end = start;
        let mut shape = None;
        while end < lengths.len() && end - start < max_rows {
            let candidate_longest = longest.max(lengths[end]);
            let (Some(rows), Some(steps)) =
                (bucket(&buckets.batch, end - start + 1), bucket(&buckets.prompt, candidate_longest))
            else {
                break;
            };
            let fits = rows.checked_mul(steps).is_some_and(|tokens| tokens <= token_budget);
            if end > start && !fits {
                break;
            }
            longest = candidate_longest;
            shape = Some((rows, steps));
            end += 1;
        }
        let Some((rows, steps)) = shape else { break };
        let window = bucket(&buckets.window, steps).unwrap_or(steps);
        groups.push(PrefillGroup { start, end, rows, steps, window });
        start = end;
    }
    groups
}

/// The decode step's sizes for `positions` (each running request's next write position): the
/// batch bucket of their count and the window bucket holding the furthest one.
pub fn decode_shape(positions: &[usize], buckets: &Buckets) -> Option<(usize, usize)> {
    let furthest = positions.iter().copied().max()?;
    Some((bucket(&buckets.batch, positions.len())?, bucket(&buckets.window, furthest.checked_add(1)?)?))
}

/// The most programs greedy serving compiles: every (batch, window) pair for decode steps, and
/// every prefill shape whose padded tokens fit the budget (one row always fits).
pub fn program_count(buckets: &Buckets, token_budget: usize, max_rows: usize) -> usize {
    let decode = buckets.batch.iter().filter(|&&rows| rows <= max_rows.max(1)).count() * buckets.window.len();
    let prefill: usize = buckets
        .prompt
        .iter()
        .map(|&steps| {
            buckets
                .batch
                .iter()
                .enumerate()
                .filter(|&(index, &rows)| {
                    index == 0 || (rows <= max_rows && rows.checked_mul(steps).is_some_and(|t| t <= token_budget))
                })
                .count()
        })
        .sum();
    decode + prefill
}

/// Free cache slots, handed out lowest first so running requests stay in the low slots.
#[derive(Clone, Debug)]
pub struct Slots {
    free: BTreeSet<usize>,
}

impl Slots {
    /// Slots `0..count`, all free.
    pub fn new(count: usize) -> Slots {
        Slots { free: (0..count).collect() }
    }

    /// Takes the lowest free slot.
    pub fn take(&mut self) -> Option<usize> {
        self.free.pop_first()
    }

    /// Gives a slot back.
    pub fn give(&mut self, slot: usize) {
        let fresh = self.free.insert(slot);
        debug_assert!(fresh, "slot {slot} was given back twice");
    }

    /// How many are free.
    pub fn free(&self) -> usize {
        self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buckets() -> Buckets {
        Buckets { batch: vec![1, 2, 4, 8], prompt: vec![16, 32, 64], window: vec![32, 64] }
    }

    #[test]
    fn buckets_are_the_smallest_that_hold() {
        assert_eq!(bucket(&[1, 2, 4, 8], 3), Some(4));
        assert_eq!(bucket(&[1, 2, 4, 8], 8), Some(8));
        assert_eq!(bucket(&[1, 2, 4, 8], 9), None);
    }

    #[test]
    fn prefills_group_in_order_within_the_budget() {
        let groups = prefill_groups(&[5, 9, 20, 3, 60, 7], &buckets(), 64, 8);
        let spans: Vec<_> = groups.iter().map(|g| (g.start, g.end, g.rows, g.steps, g.window)).collect();
        // 5, 9: 2 rows of 16; adding 20 needs 4 rows of 32 = 128 > 64. 20, 3: 2 rows of 32.
        // 60 goes alone (64 tokens); 7 is left.
        assert_eq!(spans, vec![(0, 2, 2, 16, 32), (2, 4, 2, 32, 32), (4, 5, 1, 64, 64), (5, 6, 1, 16, 32)]);
        let many = prefill_groups(&[3; 10], &buckets(), 1000, 4);
        assert_eq!(many.iter().map(|g| g.end - g.start).collect::<Vec<_>>(), vec![4, 4, 2]);
    }

    #[test]
    fn a_prompt_over_the_budget_still_runs_alone() {
        let groups = prefill_groups(&[64, 64], &buckets(), 16, 8);
        assert_eq!(groups.iter().map(|g| (g.start, g.end, g.rows)).collect::<Vec<_>>(), vec![(0, 1, 1), (1, 2, 1)]);
    }

    #[test]
    fn decode_shapes_cover_the_furthest_position() {
        assert_eq!(decode_shape(&[3, 31, 0], &buckets()), Some((4, 32)));
        assert_eq!(decode_shape(&[32], &buckets()), Some((1, 64)));
        assert_eq!(decode_shape(&[64], &buckets()), None);
        assert_eq!(decode_shape(&[], &buckets()), None);
    }

    #[test]
    fn the_program_count_matches_the_shapes_met() {
        let buckets = buckets();
        // Decode: 4 batch buckets x 2 windows. Prefill within 64 tokens: 16 -> 1, 2, 4 rows;
        // 32 -> 1, 2; 64 -> 1.
        assert_eq!(program_count(&buckets, 64, 8), 8 + 3 + 2 + 1);
        let mut seen = std::collections::BTreeSet::new();
        for lengths in [vec![1; 8], vec![17; 8], vec![40; 3], vec![5, 30, 60]] {
            for group in prefill_groups(&lengths, &buckets, 64, 8) {
                seen.insert((group.rows, group.steps));
            }
        }
        assert!(seen.len() <= 6, "{seen:?}");
    }

    #[test]
    fn slots_go_lowest_first_and_come_back() {
        let mut slots = Slots::new(3);
        assert_eq!((slots.take(), slots.take()), (Some(0), Some(1)));
        slots.give(0);
        assert_eq!((slots.take(), slots.take(), slots.take()), (Some(0), Some(2), None));
        assert_eq!(slots.free(), 0);
    }
}
