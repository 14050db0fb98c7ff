//! The one place every random source of a process can be seeded from: a
//! simulation seeds the thread it runs on ([`seed_thread`]), and from then
//! on every random choice made on that thread through [`ThreadOr`] — node
//! ids, domain ids, nonces, the client's own choices — comes from one
//! generator drawn from that seed, so a seed replays. Nothing here reads
//! the operating system: a driver wraps its OS source, which is used
//! whenever the thread is not seeded (always, outside a simulation).

use rand_chacha::ChaCha12Rng;
use rand_core::{CryptoRng, RngCore, SeedableRng};
use std::cell::RefCell;

thread_local! {
    static SEEDED: RefCell<Option<ChaCha12Rng>> = const { RefCell::new(None) };
}

/// Seeds this thread's generator (`None`: back to each driver's own source).
pub fn seed_thread(seed: Option<u64>) {
    SEEDED.with(|s| *s.borrow_mut() = seed.map(ChaCha12Rng::seed_from_u64));
}

/// This thread's seeded generator if it has one, else `R` (the OS's, in a driver).
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadOr<R>(pub R);

impl<R: RngCore> RngCore for ThreadOr<R> {
    fn next_u32(&mut self) -> u32 {
        rand_core::impls::next_u32_via_fill(self)
    }

    fn next_u64(&mut self) -> u64 {
        rand_core::impls::next_u64_via_fill(self)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        let seeded = SEEDED.with(|s| s.borrow_mut().as_mut().map(|g| g.fill_bytes(dest)).is_some());
        if !seeded {
            self.0.fill_bytes(dest);
        }
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

/// Cryptographically strong when `R` is: the seeded generator (ChaCha12) is
/// a CSPRNG, though one whose seed a simulation knows.
impl<R: CryptoRng> CryptoRng for ThreadOr<R> {}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_rng::Counter as Counting;

    #[test]
    fn a_seeded_thread_replays_and_an_unseeded_one_uses_its_own_source() {
        let draw = || (ThreadOr(Counting(0)).next_u64(), ThreadOr(Counting(0)).next_u64());
        seed_thread(Some(7));
        let first = draw();
        seed_thread(Some(7));
        assert_eq!(draw(), first, "the same seed gives the same draws");
        assert_ne!(first.0, first.1, "draws go on from one generator");
        seed_thread(Some(8));
        assert_ne!(draw(), first);
        seed_thread(None);
        assert_eq!(ThreadOr(Counting(0)).next_u32(), u32::from_le_bytes([1, 2, 3, 4]));
        // Another thread is not seeded by this one.
        seed_thread(Some(7));
        let other = std::thread::spawn(|| ThreadOr(Counting(0)).next_u32()).join().unwrap();
        assert_eq!(other, u32::from_le_bytes([1, 2, 3, 4]));
        seed_thread(None);
    }
}
