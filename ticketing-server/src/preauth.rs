//! The budget of unauthenticated connections of one port (docs/security.md,
//! "Unauthenticated connections"): at most `per_addr` from one source
//! address and `total` in all, apart from the port's connection slots.
//!
//! A connection is admitted at accept and holds its [`PreAuthPermit`] until
//! its handshake is done (then it drops the permit) or it ends. When the
//! budget is full, the OLDEST unauthenticated connection (of the same
//! address when that address is at its share, else of any) is evicted to
//! admit the new one: its task sees [`PreAuthPermit::evicted`] and closes.
//! So idle or slow connections can only push each other out: a client or
//! peer with the right token, whose handshake takes milliseconds, gets its
//! try however many idle connections were opened before it, and is pushed
//! out only if a whole share of newer connections arrives within its
//! handshake (a flood at that rate is a denial of service by CPU anyway).
//! Refusing the newcomer instead would let anyone who keeps the budget full
//! of young connections keep every real client out.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::oneshot;

#[derive(Debug, Default)]
struct State {
    next: u64,
    /// Admitted connections by age (oldest first): their address and the
    /// sender that tells them they were evicted.
    entries: BTreeMap<u64, (IpAddr, oneshot::Sender<()>)>,
    per_addr: HashMap<IpAddr, usize>,
}

impl State {
    fn remove(&mut self, id: u64) -> Option<oneshot::Sender<()>> {
        let (ip, tx) = self.entries.remove(&id)?;
        if let Some(n) = self.per_addr.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                self.per_addr.remove(&ip);
            }
        }
        Some(tx)
    }
}

/// The unauthenticated-connection budget of one port.
#[derive(Debug, Clone)]
pub struct PreAuth {
    state: Arc<Mutex<State>>,
    total: usize,
    per_addr: usize,
}

impl PreAuth {
    /// At most `total` unauthenticated connections, `per_addr` from one
    /// address (both at least 1).
    pub fn new(total: usize, per_addr: usize) -> PreAuth {
        PreAuth { state: Arc::default(), total: total.max(1), per_addr: per_addr.max(1) }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits a new connection from `ip`; `true` with it when an older one
    /// was evicted for it.
    pub fn admit(&self, ip: IpAddr) -> (PreAuthPermit, bool) {
        let mut s = self.lock();
        let victim = if s.per_addr.get(&ip).copied().unwrap_or(0) >= self.per_addr {
            s.entries.iter().find(|(_, (a, _))| *a == ip).map(|(id, _)| *id)
        } else if s.entries.len() >= self.total {
            s.entries.keys().next().copied()
        } else {
            None
        };
        let evicted = match victim.and_then(|id| s.remove(id)) {
            Some(tx) => {
                let _ = tx.send(());
                true
            }
            None => false,
        };
        let id = s.next;
        s.next += 1;
        let (tx, rx) = oneshot::channel();
        s.entries.insert(id, (ip, tx));
        *s.per_addr.entry(ip).or_insert(0) += 1;
        (PreAuthPermit { id, state: self.state.clone(), evicted: rx }, evicted)
    }

    /// Unauthenticated connections now.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One admitted unauthenticated connection; dropping it (handshake done,
/// or the connection gone) frees its place.
#[derive(Debug)]
pub struct PreAuthPermit {
    id: u64,
    state: Arc<Mutex<State>>,
    evicted: oneshot::Receiver<()>,
}

impl PreAuthPermit {
    /// Completes when a newer connection evicted this one (never otherwise
    /// while the permit is held).
    pub async fn evicted(&mut self) {
        if (&mut self.evicted).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for PreAuthPermit {
    fn drop(&mut self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).remove(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::task::{Context, Poll};

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    fn is_evicted(p: &mut PreAuthPermit) -> bool {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let fut = p.evicted();
        let mut fut = std::pin::pin!(fut);
        matches!(fut.as_mut().poll(&mut cx), Poll::Ready(()))
    }

    #[test]
    fn the_oldest_of_a_full_address_is_evicted_then_the_oldest_of_all() {
        let budget = PreAuth::new(4, 2);
        let (mut a1, e) = budget.admit(ip(1));
        assert!(!e);
        let (mut a2, _) = budget.admit(ip(1));
        // Address 1 is at its share: its oldest goes, nobody else's.
        let (mut a3, e) = budget.admit(ip(1));
        assert!(e && is_evicted(&mut a1) && !is_evicted(&mut a2) && !is_evicted(&mut a3));
        assert_eq!(budget.len(), 2);
        let (mut b1, _) = budget.admit(ip(2));
        let (_b2, e) = budget.admit(ip(2));
        assert!(!e);
        assert_eq!(budget.len(), 4);
        // Full in total: the oldest of all goes (a2), whoever asks.
        let (_c1, e) = budget.admit(ip(3));
        assert!(e && is_evicted(&mut a2) && !is_evicted(&mut a3) && !is_evicted(&mut b1));
        assert_eq!(budget.len(), 4);
        // A finished handshake frees its place: no eviction for the next one.
        drop(a3);
        let (_c2, e) = budget.admit(ip(3));
        assert!(!e);
        drop(a1);
        assert_eq!(budget.len(), 4, "an evicted permit's drop frees nothing twice");
    }

    #[test]
    fn an_idle_flood_from_one_address_never_keeps_a_newcomer_out() {
        let budget = PreAuth::new(8, 4);
        let mut flood: Vec<PreAuthPermit> = (0..200).map(|_| budget.admit(ip(1)).0).collect();
        assert_eq!(flood.iter_mut().map(is_evicted).filter(|e| !e).count(), 4, "the flood pushed itself out");
        let (mut newcomer, evicted) = budget.admit(ip(1));
        assert!(evicted && !is_evicted(&mut newcomer));
        // Another address is not touched by the flood at all.
        let (mut other, evicted) = budget.admit(ip(2));
        assert!(!evicted && !is_evicted(&mut other));
    }
}
