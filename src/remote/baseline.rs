//! The baseline the object-store benchmarks compare a gather with (feature `diagnostics`).

/// The baseline of a remote gather benchmark: for each batch, one range GET per record of
/// field `field` (its stored bytes), `concurrency` at once, straight through the object-store
/// client: no coalescing, no checksum, no decoding, no cache. What the store and the client
/// deliver on this machine. Returns the bytes fetched.
///
/// # Errors
/// [`crate::Error::InvalidConfig`] if `ds` is not on an object store or reads cached chunks
/// (open it with `cache_bytes(0)`); the errors of the requests.
pub fn range_get_loop(
    ds: &crate::Dataset,
    batches: &[Vec<u64>],
    field: usize,
    concurrency: usize,
) -> crate::Result<u64> {
    use futures::{StreamExt, TryStreamExt};
    let location: &dyn std::any::Any = &**ds.location();
    let remote = location
        .downcast_ref::<super::open::Remote>()
        .ok_or_else(|| crate::Error::InvalidConfig {
            reason: format!("{} is not on an object store", ds.path().display()),
        })?;
    let snap = ds.snapshot();
    let prefix = format!("{}/", remote.store.url());
    let mut total = 0u64;
    for batch in batches {
        let mut gets = Vec::with_capacity(batch.len());
        for &i in batch {
            let at = snap.locate(field, i)?;
            let Some(chunk) = at.chunk else { continue };
            let key = chunk
                .to_str()
                .and_then(|c| c.strip_prefix(&prefix))
                .ok_or_else(|| crate::Error::InvalidConfig {
                    reason: format!(
                        "{} is a cached chunk: the baseline reads the store (cache_bytes 0)",
                        chunk.display()
                    ),
                })?
                .to_string();
            gets.push((key, at.offset, at.offset + u64::from(at.stored_len)));
        }
        let store = std::sync::Arc::clone(&remote.store);
        let n = concurrency.max(1);
        total += super::store::block_on(async move {
            futures::stream::iter(gets)
                .map(|(key, start, end)| {
                    let store = std::sync::Arc::clone(&store);
                    async move { store.raw_get_range(&key, start..end).await }
                })
                .buffer_unordered(n)
                .try_fold(0u64, |acc, b| async move { Ok(acc + b) })
                .await
        })??;
    }
    Ok(total)
}
