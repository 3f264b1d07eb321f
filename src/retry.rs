//! The one retry loop: a [`RetryPolicy`] (tries in all, a first wait that doubles up to a
//! longest wait) and the loop that follows it, [`retry`], for the prefetch workers (blocking,
//! through [`retry_blocking`]) and the object store's requests (async) alike. A leaf: it imports
//! nothing of the crate.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How often a failing operation is tried before its error is returned, and how long to wait
/// between tries: a prefetch worker's batch (gather and transform) before it hands the error to
/// the consumer, say.
///
/// Built from [`RetryPolicy::default`] with chainable setters:
///
/// ```
/// use std::time::Duration;
/// use zrecord::pipeline::RetryPolicy;
///
/// let policy = RetryPolicy::default().attempts(5).backoff(Duration::from_millis(50));
/// assert_eq!(policy.max_backoff, Duration::from_secs(1));
/// assert_eq!(RetryPolicy::none().attempts, 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Tries in all, the first included: 1 never retries. At least 1. Default: 3.
    pub attempts: u32,
    /// The wait before the second try; each later wait doubles, up to `max_backoff`.
    /// Default: 10 ms.
    pub backoff: Duration,
    /// The longest wait between two tries. Default: 1 s.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    /// 3 tries, 10 ms then 20 ms apart (doubling, at most 1 s).
    fn default() -> Self {
        Self {
            attempts: 3,
            backoff: Duration::from_millis(10),
            max_backoff: Duration::from_secs(1),
        }
    }
}

impl RetryPolicy {
    /// One try, no retry.
    #[must_use]
    pub fn none() -> Self {
        Self::default().attempts(1)
    }

    /// Sets the number of tries in all, at least 1. Default 3.
    #[must_use]
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts;
        self
    }

    /// Sets the wait before the second try (later waits double). Default 10 ms.
    #[must_use]
    pub fn backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }

    /// Sets the longest wait between two tries. Default 1 s.
    #[must_use]
    pub fn max_backoff(mut self, max_backoff: Duration) -> Self {
        self.max_backoff = max_backoff;
        self
    }

    /// The waits before the second, third, … try: `backoff` (at most `max_backoff`), then
    /// doubling up to `max_backoff`, one per try after the first (`attempts - 1` in all).
    pub(crate) fn waits(&self) -> impl Iterator<Item = Duration> {
        let max = self.max_backoff;
        let first = self.backoff.min(max);
        std::iter::successors(Some(first), move |d| Some(d.saturating_mul(2).min(max)))
            .take(usize::try_from(self.attempts.saturating_sub(1)).unwrap_or(usize::MAX))
    }
}

/// How one try failed.
#[derive(Debug)]
pub(crate) enum Failure<E> {
    /// Try again, as the policy allows.
    Retry(E),
    /// Do not try again (a panic, an answer another try would not change).
    Final(E),
}

/// An error raised with `?` in a try is not retried.
impl<E> From<E> for Failure<E> {
    fn from(e: E) -> Self {
        Failure::Final(e)
    }
}

/// Runs `attempt` until it succeeds, fails with [`Failure::Final`], or the policy's tries are
/// spent, and returns its value or its last error. `attempt(cx, n)` is try `n` (from 1). Between
/// two tries, `wait(cx, error, n, delay)` waits `delay` after try `n` failed with `error`, and
/// says whether to go on (`false` returns `error`: the caller went away).
///
/// # Cancel safety
/// Dropping the future drops the try or the wait in progress; nothing else is held.
pub(crate) async fn retry<C, T, E, A, AF, W, WF>(
    policy: RetryPolicy,
    cx: &mut C,
    mut attempt: A,
    mut wait: W,
) -> Result<T, E>
where
    A: FnMut(&mut C, u32) -> AF,
    AF: Future<Output = Result<T, Failure<E>>>,
    W: FnMut(&mut C, &E, u32, Duration) -> WF,
    WF: Future<Output = bool>,
{
    let mut waits = policy.waits();
    let mut tries = 1u32;
    loop {
        let error = match attempt(cx, tries).await {
            Ok(value) => return Ok(value),
            Err(Failure::Final(e)) => return Err(e),
            Err(Failure::Retry(e)) => e,
        };
        let Some(delay) = waits.next() else {
            return Err(error);
        };
        if !wait(cx, &error, tries, delay).await {
            return Err(error);
        }
        tries = tries.saturating_add(1);
    }
}

/// [`retry`] on this thread: `attempt` runs here and `wait` blocks it (both return at once to
/// the loop, so it completes in one poll, with no allocation and no waker).
pub(crate) fn retry_blocking<C, T, E>(
    policy: RetryPolicy,
    cx: &mut C,
    mut attempt: impl FnMut(&mut C, u32) -> Result<T, Failure<E>>,
    mut wait: impl FnMut(&mut C, &E, u32, Duration) -> bool,
) -> Result<T, E> {
    let mut run = pin!(retry(
        policy,
        cx,
        |cx, n| std::future::ready(attempt(cx, n)),
        |cx, e, n, delay| std::future::ready(wait(cx, e, n, delay)),
    ));
    let mut context = Context::from_waker(futures::task::noop_waker_ref());
    loop {
        // Every future the loop awaits is ready when it is made: the first poll returns.
        if let Poll::Ready(result) = run.as_mut().poll(&mut context) {
            return result;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn waits_double_up_to_the_longest_one_per_retry() {
        let p = RetryPolicy::default()
            .attempts(6)
            .backoff(ms(10))
            .max_backoff(ms(50));
        assert_eq!(
            p.waits().collect::<Vec<_>>(),
            [ms(10), ms(20), ms(40), ms(50), ms(50)]
        );
        assert_eq!(RetryPolicy::none().waits().count(), 0);
        let long = RetryPolicy::default()
            .backoff(ms(5000))
            .max_backoff(ms(100));
        assert_eq!(long.waits().collect::<Vec<_>>(), [ms(100), ms(100)]);
    }

    #[test]
    fn the_loop_tries_as_the_policy_says_and_stops_at_a_final_failure() {
        let policy = RetryPolicy::default().attempts(4);
        // Fails twice, then succeeds: three tries, two waits.
        let mut log = Vec::new();
        let r: Result<u32, &str> = retry_blocking(
            policy,
            &mut log,
            |log, n| {
                log.push(format!("try {n}"));
                if n < 3 {
                    Err(Failure::Retry("no"))
                } else {
                    Ok(n)
                }
            },
            |log, e, n, d| {
                log.push(format!("wait {d:?} after try {n}: {e}"));
                true
            },
        );
        assert_eq!(r, Ok(3));
        assert_eq!(
            log,
            [
                "try 1",
                "wait 10ms after try 1: no",
                "try 2",
                "wait 20ms after try 2: no",
                "try 3"
            ]
        );
        // Always failing: four tries, then the last error.
        let mut tries = 0;
        let r: Result<(), u32> = retry_blocking(
            policy,
            &mut tries,
            |t, n| {
                *t += 1;
                Err(Failure::Retry(n))
            },
            |_, _, _, _| true,
        );
        assert_eq!((r, tries), (Err(4), 4));
        // A final failure and a wait that gives up end the loop at once.
        let r: Result<(), u32> = retry_blocking(
            policy,
            &mut (),
            |_, n| Err(Failure::Final(n)),
            |_, _, _, _| true,
        );
        assert_eq!(r, Err(1));
        let r: Result<(), u32> = retry_blocking(
            policy,
            &mut (),
            |_, n| Err(Failure::Retry(n)),
            |_, _, _, _| false,
        );
        assert_eq!(r, Err(1));
    }
}
