//! Runs a small set of futures to their ends together: `futures_util`'s `join_all`
//! without its path for large sets (`FuturesOrdered`, taken past 30), whose code each
//! instance would add to the Worker. Every future still pending is polled at each wake,
//! so this is for sets of a few dozen at most (a queue batch, a stream's jobs, a
//! certification's calls); a fan-out over every shard keeps `join_all`.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

/// One future of the set, and its output once it has ended.
type Slot<F> = (Pin<Box<F>>, Option<<F as Future>::Output>);

/// The outputs of `futures`, in their order, once all have ended.
pub fn together<F: Future>(
    futures: impl IntoIterator<Item = F>,
) -> impl Future<Output = Vec<F::Output>> {
    let mut slots: Vec<Slot<F>> = futures
        .into_iter()
        .map(|future| (Box::pin(future), None))
        .collect();
    std::future::poll_fn(move |cx| {
        let mut done = true;
        for (future, out) in slots.iter_mut().filter(|(_, out)| out.is_none()) {
            match future.as_mut().poll(cx) {
                Poll::Ready(value) => *out = Some(value),
                Poll::Pending => done = false,
            }
        }
        match done {
            true => Poll::Ready(slots.drain(..).filter_map(|(_, out)| out).collect()),
            false => Poll::Pending,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::together;
    use futures_util::FutureExt;

    #[test]
    fn every_output_comes_back_in_order_once_all_have_ended() {
        let ready = std::cell::Cell::new(false);
        let later = std::future::poll_fn(|_| match ready.get() {
            true => std::task::Poll::Ready(2),
            false => std::task::Poll::Pending,
        });
        let mut all = Box::pin(together([later.boxed_local(), async { 1 }.boxed_local()]));
        assert!((&mut all).now_or_never().is_none(), "one is still pending");
        ready.set(true);
        assert_eq!(all.now_or_never(), Some(vec![2, 1]));
        let none = together(Vec::<std::future::Ready<u8>>::new());
        assert_eq!(none.now_or_never(), Some(vec![]));
    }
}
