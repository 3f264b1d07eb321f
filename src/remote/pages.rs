//! Offset-table pages of a dataset on an object store: range requests of its table objects,
//! issued together through the same client and retry policy as chunk reads (the page logic,
//! its checks and the page file are `store/paged.rs`'s).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};

use super::backend::{TABLE_FETCHED, TABLE_REQUESTS};
use super::store::{block_on, Store};
use crate::error::Result;
use crate::store::paged::{PageRead, PageSource};

/// The table objects of one store, read by range.
#[derive(Debug)]
pub(crate) struct StorePages {
    store: Arc<Store>,
    /// Requests in flight at most: `RemoteConfig::requests_in_flight`.
    in_flight: usize,
    /// The largest request: `RemoteConfig::max_request`.
    max_request: u64,
}

impl StorePages {
    pub(crate) fn new(store: Arc<Store>, in_flight: usize, max_request: u64) -> StorePages {
        StorePages {
            store,
            in_flight: in_flight.max(1),
            max_request: max_request.max(1),
        }
    }
}

impl PageSource for StorePages {
    fn fetch(&self, reads: Vec<PageRead>) -> Result<Vec<Bytes>> {
        let store = Arc::clone(&self.store);
        let in_flight = self.in_flight;
        block_on(async move {
            futures::stream::iter(reads)
                .map(|r| {
                    let store = Arc::clone(&store);
                    async move {
                        let b = store.get_range(&r.object, r.range).await?;
                        TABLE_REQUESTS.fetch_add(1, Ordering::Relaxed);
                        TABLE_FETCHED.fetch_add(b.len() as u64, Ordering::Relaxed);
                        Ok::<_, crate::Error>(b)
                    }
                })
                .buffered(in_flight)
                .try_collect()
                .await
        })?
    }

    fn max_read(&self) -> u64 {
        self.max_request
    }
}
