//! A watch that starts over from a full list after any error, so that its cache is known to be
//! current again when the list is done.

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::runtime::watcher;

/// A watch that starts over from a full list after any error. kube's watcher resumes from the
/// last version it saw where it can, and then nothing says when it has caught up: the cache it
/// fills would pass for current all along (issue 43: after a cluster's apiserver restarted, a
/// cache that had not seen a copy took its place for empty, and two creates were refused as
/// AlreadyExists). Started over, the cache keeps what it held until the list is done (the
/// reflector swaps at `InitDone`), and is current from then on. Each start is `start()`.
pub(super) fn relisting<K>(
    start: impl Fn() -> BoxStream<'static, WatchEvent<K>> + Send + 'static,
) -> impl Stream<Item = WatchEvent<K>> + Send + 'static
where
    K: Send + 'static,
{
    let current: Option<BoxStream<'static, WatchEvent<K>>> = None;
    let ahead: Option<WatchEvent<K>> = None;
    futures::stream::unfold((start, current, ahead), |(start, current, ahead)| async move {
        if let Some(event) = ahead {
            return Some((event, (start, current, None)));
        }
        let mut stream = current.unwrap_or_else(&start);
        match stream.next().await? {
            // A start whose list fails is no start: its `Init` is held back, or it would reset
            // the backoff (as kube's own watcher does) and a cluster that is down would be asked
            // again every 250 ms.
            Ok(watcher::Event::Init) => match stream.next().await? {
                Err(e) => Some((Err(e), (start, None, None))),
                next => Some((Ok(watcher::Event::Init), (start, Some(stream), Some(next)))),
            },
            // The next poll, past the backoff, starts afresh.
            Err(e) => Some((Err(e), (start, None, None))),
            event => Some((event, (start, Some(stream), None))),
        }
    })
}

/// What a watch brings: an event, or why it failed.
pub(super) type WatchEvent<K> = Result<watcher::Event<K>, watcher::Error>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// issue 43, 6: after an error the watch starts over from a list, whose end says that its
    /// cache is current again (resumed from its last version, it would say nothing); a start
    /// whose list fails says only that it failed.
    #[tokio::test]
    async fn a_failed_watch_starts_over_from_a_list() {
        use watcher::Event::{Apply, Init, InitApply, InitDone};
        let starts = Arc::new(Mutex::new(std::collections::VecDeque::from([
            vec![
                Ok(Init),
                Ok(InitApply("a")),
                Ok(InitDone),
                Ok(Apply("b")),
                Err(watcher::Error::NoResourceVersion),
                Ok(Apply("after the error, from the watch that failed")),
            ],
            vec![Ok(Init), Err(watcher::Error::NoResourceVersion)],
            vec![Ok(Init), Ok(InitApply("a")), Ok(InitApply("b")), Ok(InitDone)],
        ])));
        let next = starts.clone();
        let seen: Vec<String> = relisting(move || {
            let script = next.lock().unwrap().pop_front().unwrap_or_default();
            futures::stream::iter(script)
                .chain(futures::stream::pending())
                .boxed()
        })
        .take(10)
        .map(|event| event.map_or_else(|_| "error".to_owned(), |e| format!("{e:?}")))
        .collect()
        .await;
        assert_eq!(
            seen,
            [
                "Init",
                "InitApply(\"a\")",
                "InitDone",
                "Apply(\"b\")",
                "error",
                "error",
                "Init",
                "InitApply(\"a\")",
                "InitApply(\"b\")",
                "InitDone",
            ]
        );
        assert!(starts.lock().unwrap().is_empty(), "started three times");
    }
}
