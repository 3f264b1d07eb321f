//! Blocking on a future from any thread, even one inside another executor.

use std::sync::Arc;

/// Runs `fut` to completion on this thread, parking it while the future is pending.
///
/// The writer's blocking API and the append tasks wait with this rather than
/// `futures::executor::block_on`, which panics when called from inside another `futures`
/// executor: a blocking `append` must work wherever a blocking call may be made.
pub(crate) fn wait<F: std::future::Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let std::task::Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}
