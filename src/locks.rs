//! One way to take a mutex. A thread that panics while holding a lock poisons it; the data
//! behind every lock here stays consistent between statements (counters, queues, rings), so
//! the other threads carry on with it rather than panic in turn and take the monitor down.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// [`Mutex::lock`], recovering the guard from a poisoned lock.
pub trait Locked<T: ?Sized> {
    /// The guard, whether or not a panic poisoned the lock.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> Locked<T> for Mutex<T> {
    #[inline]
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_poisoned_by_a_panic_is_still_taken() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let mut g = m2.lock().unwrap();
            *g = 2;
            panic!("poisons the lock");
        })
        .join();
        assert!(m.is_poisoned());
        assert_eq!(*m.locked(), 2);
    }
}
