//! Next-fit placement into chunks of `chunk_size_bytes`: the one rule the append tasks follow
//! and the writer projects to check the chunk-id limit.
//!
//! A chunk is filled in order; a value that does not fit seals it and opens a fresh one. A value
//! larger than a chunk still goes, alone, into an empty one. Next fit is monotone in value
//! sizes, so projecting it over logical lengths (an upper bound of stored lengths) never opens
//! fewer chunks than the append tasks will.

/// True if `n` more bytes go into a chunk of `size` bytes under the chunk-size `limit`: a
/// value larger than a chunk still goes, alone, into an empty one.
fn fits(size: u64, n: u64, limit: u64) -> bool {
    size == 0 || size + n <= limit
}

/// Next fit over one sequence of chunks: the size of the open chunk, if one is open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NextFit {
    /// The chunk-size limit (`chunk_size_bytes`).
    limit: u64,
    /// The size of the open chunk (`None`: no chunk open).
    open: Option<u64>,
}

impl NextFit {
    /// Next fit under `limit`, continuing an open chunk of `open` bytes if there is one.
    pub fn new(limit: u64, open: Option<u64>) -> NextFit {
        NextFit { limit, open }
    }

    /// True if a stored value of `n` bytes needs a fresh chunk: none is open, or the open one
    /// has no room for it.
    pub fn needs_fresh(&self, n: u64) -> bool {
        !self.open.is_some_and(|s| fits(s, n, self.limit))
    }

    /// Places a value of `n` bytes; returns true if it opens a fresh chunk. An absent value
    /// (`n == 0`) is stored nowhere.
    pub fn add(&mut self, n: u64) -> bool {
        if n == 0 {
            return false;
        }
        let fresh = self.needs_fresh(n);
        self.open = Some(match self.open {
            Some(s) if !fresh => s + n,
            _ => n,
        });
        fresh
    }

    /// How many of `lens` (value lengths, the first one not zero) go into one chunk: the open
    /// one, or a fresh one if the first does not fit. The first always counts.
    pub fn run_len(&self, lens: impl Iterator<Item = u64>) -> usize {
        let mut p = *self;
        let mut k = 0usize;
        for (i, n) in lens.enumerate() {
            if p.add(n) && i > 0 {
                break;
            }
            k += 1;
        }
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_fit() {
        assert!(
            fits(0, 100, 10),
            "an oversized value goes alone into an empty chunk"
        );
        assert!(fits(5, 5, 10));
        assert!(!fits(6, 5, 10));
    }

    #[test]
    fn add_opens_a_chunk_when_the_value_does_not_fit() {
        let mut p = NextFit::new(10, None);
        assert!(p.needs_fresh(1));
        assert!(p.add(4), "nothing open: the first value opens a chunk");
        assert!(!p.add(0), "an absent value is stored nowhere");
        assert!(!p.add(6));
        assert_eq!(p, NextFit::new(10, Some(10)));
        assert!(p.add(1));
        assert_eq!(p, NextFit::new(10, Some(1)));
        assert!(
            p.add(25),
            "an oversized value goes alone into a fresh chunk"
        );
        assert!(p.add(1), "and nothing follows it there");
        let resumed = NextFit::new(10, Some(7));
        assert!(!resumed.needs_fresh(3));
        assert!(resumed.needs_fresh(4));
    }

    #[test]
    fn a_run_stops_where_a_chunk_would_open() {
        let p = NextFit::new(10, Some(6));
        assert_eq!(p.run_len([4, 1].into_iter()), 1);
        assert_eq!(p.run_len([3, 0, 1, 1].into_iter()), 3);
        // The first value does not fit: the run fills a fresh chunk.
        assert_eq!(p.run_len([5, 5, 1].into_iter()), 2);
        assert_eq!(NextFit::new(10, None).run_len([20, 1].into_iter()), 1);
    }
}
