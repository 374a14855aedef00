//! The one poisoned-lock helper of rxpath: a lock whose holder panicked is
//! taken anyway. A panic in rxpath is a bug that the process reports and
//! survives where it can (a packet path must not stop because one thread
//! died holding a counter's lock), and the data a lock guards is kept
//! consistent by its holder at every step, as a kernel spinlock's, which
//! knows no poisoning.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// `m`, locked, poisoned or not.
#[inline]
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `l`, locked for reading, poisoned or not.
#[inline]
pub fn read_lock<T: ?Sized>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

/// `l`, locked for writing, poisoned or not.
#[inline]
pub fn write_lock<T: ?Sized>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}
