//! Which training images each step reads: a reshuffle of the whole training split every epoch,
//! drawn from a seed, as `Dataset.shuffle(n).repeat()` gives a TensorFlow input pipeline.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

/// An endless, seeded stream of indices into a training split of `n` images: every epoch a new
/// permutation, so each image is read once per epoch. Epoch `e`'s permutation is drawn from the
/// seed and `e` alone, so a stream resumed at any position costs one shuffle, however many
/// epochs lie behind it.
#[derive(Clone, Debug)]
pub struct Sampler {
    order: Vec<usize>,
    next: usize,
    seed: u64,
    /// The epoch `order` is the permutation of.
    epoch: u64,
    /// Images handed out so far.
    pub taken: u64,
}

/// The permutation of `0..n` of epoch `epoch` of a stream seeded with `seed` (epoch 0's is the
/// seed's own shuffle).
fn permutation(n: usize, seed: u64, epoch: u64) -> Vec<usize> {
    let mut rng = StdRng::seed_from_u64(seed ^ epoch.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut order: Vec<usize> = (0..n.max(1)).collect();
    order.shuffle(&mut rng);
    order
}

impl Sampler {
    /// A stream over `n` images drawn with `seed`. `n` must be at least 1.
    pub(crate) fn new(n: usize, seed: u64) -> Sampler {
        Sampler {
            order: permutation(n, seed, 0),
            next: 0,
            seed,
            epoch: 0,
            taken: 0,
        }
    }

    /// The stream `new(n, seed)` gives after `taken` images were handed out: the same epoch's
    /// permutation at the same position, so a resumed run reads on where it stopped. Costs one
    /// shuffle whatever `taken` is.
    pub(crate) fn resumed(n: usize, seed: u64, taken: u64) -> Sampler {
        let mut s = Sampler::new(n, seed);
        if taken > 0 {
            // `take` moves to the next epoch only when it needs an index past the end: after
            // `taken` images it is in epoch (taken − 1) ÷ n, at the rest.
            let len = s.order.len() as u64;
            let epoch = (taken - 1) / len;
            if epoch > 0 {
                s.order = permutation(n, seed, epoch);
                s.epoch = epoch;
            }
            s.next = (taken - epoch * len) as usize;
        }
        s.taken = taken;
        s
    }

    /// The next `k` indices.
    pub(crate) fn take(&mut self, k: usize) -> Vec<usize> {
        let mut out = Vec::with_capacity(k);
        while out.len() < k {
            if self.next == self.order.len() {
                self.epoch += 1;
                self.order = permutation(self.order.len(), self.seed, self.epoch);
                self.next = 0;
            }
            out.push(self.order[self.next]);
            self.next += 1;
        }
        self.taken += k as u64;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_epoch_is_a_permutation_and_the_seed_fixes_it() {
        let mut a = Sampler::new(10, 3);
        let mut b = Sampler::new(10, 3);
        let first = a.take(10);
        let mut sorted = first.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..10).collect::<Vec<_>>());
        assert_eq!(first, b.take(10));
        let second = a.take(10);
        assert_ne!(first, second);
        let mut s = second.clone();
        s.sort_unstable();
        assert_eq!(s, (0..10).collect::<Vec<_>>());
        assert_eq!(a.taken, 20);
        assert_ne!(Sampler::new(10, 4).take(10), first);
    }

    #[test]
    fn a_resumed_stream_reads_on_where_the_first_stopped() {
        for taken in [0u64, 3, 10, 17, 20, 31] {
            let mut whole = Sampler::new(10, 7);
            whole.take(taken as usize);
            let mut resumed = Sampler::resumed(10, 7, taken);
            assert_eq!(resumed.taken, taken);
            assert_eq!(resumed.take(25), whole.take(25), "after {taken}");
        }
    }

    #[test]
    fn a_stream_resumes_far_out_at_once() {
        // 10^15 samples behind on 3 rows: one shuffle, not 3·10^14.
        let started = std::time::Instant::now();
        let mut s = Sampler::resumed(3, 1, 999_999_999_999_999);
        let mut next = s.take(6);
        next.sort_unstable();
        assert_eq!(next, [0, 0, 1, 1, 2, 2]);
        assert!(started.elapsed().as_secs() < 5);
    }
}
