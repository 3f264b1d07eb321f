//! A bounded single-producer single-consumer queue between a blocking worker thread and an async
//! consumer: the producer blocks (on a condition variable, on its own thread) while the queue is
//! full; the consumer polls without blocking and is woken through an [`AtomicWaker`].
//!
//! Closing is explicit in both directions, so neither side can wait forever:
//! dropping the [`Receiver`] wakes a producer blocked on a full queue and makes every later
//! [`Sender::push`] fail; dropping the [`Sender`] (worker finished, or its thread unwound) makes
//! the receiver see the end of the stream once the queued items are taken.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::task::AtomicWaker;

struct State<T> {
    items: VecDeque<T>,
    /// The receiver is gone: pushes fail.
    closed: bool,
    /// The sender is gone: no item will follow the queued ones.
    finished: bool,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    /// Signalled when an item is taken or the receiver closes.
    not_full: Condvar,
    /// The consumer's waker, woken when an item arrives or the sender finishes.
    waker: AtomicWaker,
    /// Woken when the receiver goes away (a producer waiting on futures watches it).
    close_waker: AtomicWaker,
    /// Mirror of `State::closed`, readable without the lock.
    closed: AtomicBool,
    capacity: usize,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A panic while holding this lock cannot leave the queue inconsistent (every critical
        // section is a single push/pop/flag update), so a poisoned lock is still usable.
        match self.state.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

/// The producing half, owned by a worker thread.
pub(crate) struct Sender<T> {
    shared: Arc<Shared<T>>,
}

/// The consuming half, polled by the async consumer.
pub(crate) struct Receiver<T> {
    shared: Arc<Shared<T>>,
}

/// A queue holding at most `capacity` items (at least 1).
pub(crate) fn bounded<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            items: VecDeque::with_capacity(capacity.max(1)),
            closed: false,
            finished: false,
        }),
        not_full: Condvar::new(),
        waker: AtomicWaker::new(),
        close_waker: AtomicWaker::new(),
        closed: AtomicBool::new(false),
        capacity: capacity.max(1),
    });
    (
        Sender {
            shared: Arc::clone(&shared),
        },
        Receiver { shared },
    )
}

impl<T> Sender<T> {
    /// Appends `item`, blocking the calling thread while the queue is full. Gives the item back
    /// if the receiver is gone.
    pub(crate) fn push(&self, item: T) -> std::result::Result<(), T> {
        let mut state = self.shared.lock();
        while state.items.len() >= self.shared.capacity && !state.closed {
            state = match self.shared.not_full.wait(state) {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
        }
        if state.closed {
            return Err(item);
        }
        state.items.push_back(item);
        drop(state);
        self.shared.waker.wake();
        Ok(())
    }

    /// True once the receiver is gone: the producer should stop.
    pub(crate) fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Ready once the receiver is gone; otherwise registers `cx` to be woken when it goes.
    pub(crate) fn poll_closed(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_closed() {
            return Poll::Ready(());
        }
        self.shared.close_waker.register(cx.waker());
        if self.is_closed() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// Blocks the calling thread for `timeout`, or less if the receiver goes away first; true if
    /// it has gone.
    pub(crate) fn wait_closed(&self, timeout: Duration) -> bool {
        let Some(deadline) = Instant::now().checked_add(timeout) else {
            // Past what an `Instant` holds: wait without a deadline.
            let mut state = self.shared.lock();
            while !state.closed {
                state = match self.shared.not_full.wait(state) {
                    Ok(g) => g,
                    Err(poisoned) => poisoned.into_inner(),
                };
            }
            return true;
        };
        let mut state = self.shared.lock();
        // `not_full` is also signalled when an item is taken: wait again until the deadline.
        while !state.closed {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            state = match self.shared.not_full.wait_timeout(state, left) {
                Ok((g, _)) => g,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        state.closed
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        self.shared.lock().finished = true;
        self.shared.waker.wake();
    }
}

impl<T> Receiver<T> {
    /// Takes the next item if one is queued. `Ready(None)` once the sender is gone and the queue
    /// is empty. Registers the waker of `cx` when it returns `Pending`.
    pub(crate) fn poll_pop(&self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        if let Some(v) = self.try_pop() {
            return v;
        }
        self.shared.waker.register(cx.waker());
        // Re-check: an item (or the end) may have arrived before the waker was registered.
        self.try_pop().unwrap_or(Poll::Pending)
    }

    fn try_pop(&self) -> Option<Poll<Option<T>>> {
        let mut state = self.shared.lock();
        if let Some(item) = state.items.pop_front() {
            drop(state);
            self.shared.not_full.notify_one();
            return Some(Poll::Ready(Some(item)));
        }
        state.finished.then_some(Poll::Ready(None))
    }

    /// Number of queued items.
    pub(crate) fn len(&self) -> usize {
        self.shared.lock().items.len()
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let items = {
            let mut state = self.shared.lock();
            state.closed = true;
            self.shared.closed.store(true, Ordering::Release);
            std::mem::take(&mut state.items)
        };
        self.shared.not_full.notify_all();
        self.shared.close_waker.wake();
        // Dropped outside the lock: an item's destructor may be arbitrary user code.
        drop(items);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::task::noop_waker;

    #[test]
    fn fifo_bounded_and_end_of_stream() {
        let (tx, rx) = bounded::<u32>(2);
        let waker = noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert_eq!(rx.poll_pop(&mut cx), Poll::Pending);
        let producer = std::thread::spawn(move || {
            for i in 0..10 {
                tx.push(i).unwrap();
            }
        });
        let mut got = Vec::new();
        loop {
            match rx.poll_pop(&mut cx) {
                Poll::Ready(Some(v)) => got.push(v),
                Poll::Ready(None) => break,
                Poll::Pending => std::thread::yield_now(),
            }
            assert!(rx.len() <= 2);
        }
        producer.join().unwrap();
        assert_eq!(got, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn dropping_the_receiver_unblocks_a_full_producer() {
        let (tx, rx) = bounded::<u32>(1);
        tx.push(0).unwrap();
        let producer = std::thread::spawn(move || {
            // Blocks on the full queue until the receiver goes away.
            let r = tx.push(1);
            (r, tx.is_closed())
        });
        drop(rx);
        let (r, closed) = producer.join().unwrap();
        assert_eq!(r, Err(1));
        assert!(closed);
    }

    #[test]
    fn dropping_the_receiver_ends_a_wait_for_it() {
        let (tx, rx) = bounded::<u32>(1);
        assert!(!tx.wait_closed(Duration::ZERO));
        let waiter = std::thread::spawn(move || tx.wait_closed(Duration::MAX));
        drop(rx);
        assert!(waiter.join().unwrap());
    }
}
