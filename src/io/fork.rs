//! After `fork()`: which process this is, and values that belong to one process.
//!
//! A child of `fork()` has a copy of its parent's memory but only the thread that forked: the
//! ring, pool and runtime threads the parent's values refer to are gone, and a lock another
//! parent thread held at that moment stays locked forever. A [`ForkLocal`] holds one value per
//! process: a process that finds a value made by another (its parent) makes its own, and may
//! take over what is free in the parent's copy. The parent's copy is never dropped in the child
//! (dropping it could wait on threads or locks that no longer exist, or close what the parent
//! still uses through shared descriptors): it stays, untouched, as a small leak per fork.
//!
//! The process id is read once per process and cached; a `pthread_atfork` child handler (atomic
//! stores, async-signal-safe) clears the cache in every child of `fork()`, so the check costs an
//! atomic load. (Python's `os.fork`, `multiprocessing` and torch's `DataLoader` workers fork
//! through libc's `fork()`, which runs the handler.) The locks of `lock.rs` need nothing here
//! but a [`ForkLocal`] table: a child never holds its parent's record locks.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

/// This process's id, or 0 before it is known (and again in a child of `fork()`).
static PID: AtomicU32 = AtomicU32::new(0);
/// How many `fork()`s lie between the program's start and this process (its child handler
/// adds one): a value made in another process of the chain (an ancestor) never has this
/// process's number, even when a process id was reused.
static GENERATION: AtomicU64 = AtomicU64::new(0);
/// The fork handlers' state in its low two bits (not registered, being registered, registered,
/// failed) and, while being registered, the id of the process registering them above: one word,
/// so exactly one thread wins each change (a child taking over its parent's registration too).
static HANDLERS: AtomicU64 = AtomicU64::new(UNREGISTERED);
const UNREGISTERED: u64 = 0;
const REGISTERING: u64 = 1;
const REGISTERED: u64 = 2;
const FAILED: u64 = 3;
const STATE: u64 = 3;

extern "C" fn child() {
    PID.store(0, Ordering::Relaxed);
    GENERATION.fetch_add(1, Ordering::Relaxed);
    // This handler runs, so the registration took effect, whatever the registering thread (not
    // in this child) had recorded when the fork came.
    HANDLERS.store(REGISTERED, Ordering::Release);
}

/// Registers this crate's fork handler (a child handler: the process id and the generation),
/// once per program; true once they are registered. Never waits on a `Once`: a child forked while
/// another thread registered them would wait forever. A thread that finds the registration in
/// progress in its own process waits a moment for it, then goes on without (false); a child of
/// a fork that came before the registration took effect (its handlers did not run) finds it in
/// progress in its parent's name, and takes it over: one thread of the child wins the word and
/// registers them.
pub(crate) fn handlers() -> bool {
    // One load on the fast path: this runs on every read's `ForkLocal` check.
    let mut word = HANDLERS.load(Ordering::Acquire);
    match word & STATE {
        REGISTERED => return true,
        FAILED => return false,
        _ => {}
    }
    let me = u64::from(std::process::id());
    loop {
        match word & STATE {
            REGISTERED => return true,
            FAILED => return false,
            REGISTERING if word >> 2 == me => {
                let start = std::time::Instant::now();
                while HANDLERS.load(Ordering::Acquire) == word
                    && start.elapsed() < std::time::Duration::from_millis(10)
                {
                    std::thread::yield_now();
                }
                // Still unfinished: counted as failed from now on, so no later call waits
                // again (a registration that was merely slow stores its outcome over this).
                // This is also what a process whose id was its registering ancestor's finds.
                let _ =
                    HANDLERS.compare_exchange(word, FAILED, Ordering::AcqRel, Ordering::Acquire);
                return HANDLERS.load(Ordering::Acquire) & STATE == REGISTERED;
            }
            // Not registered, or registering in another process's name (a parent).
            _ => {}
        }
        match HANDLERS.compare_exchange(
            word,
            me << 2 | REGISTERING,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => break,
            Err(now) => word = now,
        }
    }
    // SAFETY: the handler is a plain `extern "C" fn` that lives as long as the program and does
    // only what is async-signal-safe (atomic stores).
    let r = unsafe { libc::pthread_atfork(None, None, Some(child)) };
    if r == 0 {
        HANDLERS.store(REGISTERED, Ordering::Release);
        return true;
    }
    HANDLERS.store(FAILED, Ordering::Release);
    // Without it the process id is asked for on every use.
    tracing::warn!(
        error = r,
        "pthread_atfork failed; zrecord asks for the process id on every use"
    );
    false
}

/// The id of the calling process.
pub(crate) fn pid() -> u32 {
    let p = PID.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    if !handlers() {
        // Nothing would clear a cached id in a child: ask the kernel every time.
        return std::process::id();
    }
    let p = std::process::id();
    // A fork between the registration and this store leaves 0 in the child: it asks again.
    PID.store(p, Ordering::Relaxed);
    p
}

/// This process's place in its chain of `fork()`s (see [`GENERATION`]); registers the fork
/// handlers first. Equal in two calls only within one process (or in a child of a fork the
/// handlers missed, which then holds everything its parent held).
pub(crate) fn generation() -> u64 {
    handlers();
    GENERATION.load(Ordering::Relaxed)
}

/// This process, as values made in it record it: its id and its generation (an id alone may be
/// an exited ancestor's, reused; a generation alone misses a fork the handlers did not see).
fn this_process() -> (u32, u64) {
    (pid(), generation())
}

struct Entry<T> {
    /// The process that made it ([`this_process`]).
    owner: (u32, u64),
    value: T,
}

/// One `T` per process: the first use in a process makes it ([`ForkLocal::get_or_init`]); a
/// child's first use makes the child's own, whatever the parent's is doing.
pub(crate) struct ForkLocal<T> {
    slot: AtomicPtr<Entry<T>>,
    /// Owns `T`s (for drop check and auto traits: `Send`/`Sync` are implemented below).
    _owns: PhantomData<*const T>,
}

// SAFETY: a `ForkLocal` owns its `T`s; moving it to another thread moves them (dropped there):
// `T: Send` suffices.
unsafe impl<T: Send> Send for ForkLocal<T> {}
// SAFETY: through `&ForkLocal` threads get `&T` (needs `T: Sync`) and may create the `T` that
// another thread drops later (needs `T: Send`).
unsafe impl<T: Send + Sync> Sync for ForkLocal<T> {}

impl<T> ForkLocal<T> {
    /// Empty: the first use makes the value.
    pub(crate) const fn new() -> ForkLocal<T> {
        ForkLocal {
            slot: AtomicPtr::new(std::ptr::null_mut()),
            _owns: PhantomData,
        }
    }

    /// Holding `value`, as this process's.
    pub(crate) fn with(value: T) -> ForkLocal<T> {
        let entry = Box::new(Entry {
            owner: this_process(),
            value,
        });
        ForkLocal {
            slot: AtomicPtr::new(Box::into_raw(entry)),
            _owns: PhantomData,
        }
    }

    /// This process's value, made by `init` if there is none yet. `init` gets the value of the
    /// process this one was forked from, if that had one, to take over what is safe to take:
    /// nothing that a thread or lock of the parent may hold (use `try_lock`, never `lock`).
    /// Two threads of one process may both run `init`; one value is kept, the other dropped.
    pub(crate) fn get_or_init(&self, mut init: impl FnMut(Option<&T>) -> T) -> &T {
        let me = this_process();
        let mut current = self.slot.load(Ordering::Acquire);
        loop {
            // SAFETY: a non-null pointer in `slot` comes from `Box::into_raw` and is freed only
            // by `Drop` (which has `&mut self`, so no `&T` handed out lives): entries replaced
            // by a child are leaked, never freed, so the reference lives as long as `&self`.
            let old = unsafe { current.as_ref() };
            if let Some(e) = old {
                if e.owner == me {
                    return &e.value;
                }
            }
            let value = init(old.map(|e| &e.value));
            let fresh = Box::into_raw(Box::new(Entry { owner: me, value }));
            match self
                .slot
                .compare_exchange(current, fresh, Ordering::AcqRel, Ordering::Acquire)
            {
                // The other process's entry, if any, is left as it is (leaked).
                // SAFETY: `fresh` is now in `slot`: freed only by `Drop`, as above.
                Ok(_) => return unsafe { &(*fresh).value },
                Err(now) => {
                    // SAFETY: `fresh` came from `Box::into_raw` above and was never published.
                    drop(unsafe { Box::from_raw(fresh) });
                    current = now;
                }
            }
        }
    }

    /// This process's value, if it has one.
    pub(crate) fn get(&self) -> Option<&T> {
        let current = self.slot.load(Ordering::Acquire);
        // SAFETY: as in `get_or_init`.
        let e = unsafe { current.as_ref() }?;
        (e.owner == this_process()).then_some(&e.value)
    }
}

impl<T> Default for ForkLocal<T> {
    fn default() -> Self {
        ForkLocal::new()
    }
}

impl<T> Drop for ForkLocal<T> {
    fn drop(&mut self) {
        let p = *self.slot.get_mut();
        if p.is_null() {
            return;
        }
        // SAFETY: `p` came from `Box::into_raw` and `&mut self` means no reference to it lives.
        let entry = unsafe { Box::from_raw(p) };
        if entry.owner != this_process() {
            // Another process's value: its drop could wait on threads or locks this process
            // does not have.
            std::mem::forget(entry);
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for ForkLocal<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.get() {
            Some(v) => f.debug_tuple("ForkLocal").field(v).finish(),
            None => f.write_str("ForkLocal(<not made in this process>)"),
        }
    }
}

/// The value behind `m` taken out, if no thread holds it (in a child of `fork()`, a lock held at
/// the fork is held forever); `None` if one does.
pub(crate) fn take_unlocked<T: Default>(m: &std::sync::Mutex<T>) -> Option<T> {
    match m.try_lock() {
        Ok(mut g) => Some(std::mem::take(&mut *g)),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(std::mem::take(&mut *p.into_inner())),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
    use super::*;

    #[test]
    fn one_value_per_process() {
        let l = ForkLocal::<u32>::new();
        assert!(l.get().is_none());
        assert_eq!(*l.get_or_init(|prev| prev.copied().unwrap_or(7)), 7);
        assert_eq!(*l.get_or_init(|_| 9), 7);
        assert_eq!(l.get(), Some(&7));
        assert_eq!(pid(), std::process::id());
        let w = ForkLocal::with(String::from("x"));
        assert_eq!(w.get().map(String::as_str), Some("x"));
    }

    /// A child of `fork()` knows it is another process at once, makes its own value from its
    /// parent's, and takes nothing from a lock held at the fork.
    #[test]
    fn a_child_makes_its_own() {
        let parent = pid();
        let parent_generation = generation();
        let l = ForkLocal::<(u32, u32)>::new();
        assert_eq!(*l.get_or_init(|_| (parent, 0)), (parent, 0));
        let held = std::sync::Mutex::new(vec![1u8]);
        let free = std::sync::Mutex::new(vec![2u8]);
        let guard = held.lock().unwrap();
        // SAFETY: the child only reads memory, makes a value and `_exit`s.
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            let me = pid();
            let v = *l.get_or_init(|prev| (me, prev.map_or(0, |p| p.0)));
            let ok = me == std::process::id()
                && me != parent
                && v == (me, parent)
                && *l.get_or_init(|_| (0, 0)) == v
                && generation() == parent_generation + 1
                && take_unlocked(&held).is_none()
                && take_unlocked(&free) == Some(vec![2]);
            // SAFETY: ends the child without running the test harness's exit handlers.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        drop(guard);
        let mut status = 0;
        // SAFETY: waits for our own child.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{status:#x}"
        );
        assert_eq!(*l.get_or_init(|_| (0, 0)), (parent, 0));
        assert_eq!(pid(), parent);
        assert_eq!(generation(), parent_generation);
    }
}
