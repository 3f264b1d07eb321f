//! The dataset's user attributes as the writer sets them: staged in the writer, written by the
//! next commit's `meta.json` (format version 3).

use super::Writer;
use crate::error::{Error, Result};
use crate::format::meta::validate_attributes;
use crate::Attributes;

impl Writer {
    /// Sets attribute `key` to the JSON `value` (replacing any earlier value). Like every change
    /// it is invisible to readers, and lost if the process dies, until the next commit, which
    /// writes it into `meta.json` (and so makes the dataset format version 3).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for an empty key or one over 256 bytes, or if all attributes
    /// together would take more than 1 MiB as JSON
    /// ([`MAX_ATTRIBUTES_BYTES`](crate::MAX_ATTRIBUTES_BYTES)); nothing is
    /// changed then. [`Error::Poisoned`] on a poisoned writer.
    pub fn set_attribute(
        &mut self,
        key: impl Into<String>,
        value: serde_json::Value,
    ) -> Result<()> {
        self.check_poisoned()?;
        let mut core = self.core();
        let mut next = core.attributes.clone();
        next.insert(key.into(), value);
        validate_attributes(&next).map_err(|reason| Error::InvalidConfig {
            reason: format!("dataset attributes: {reason}"),
        })?;
        core.attributes = next;
        Ok(())
    }

    /// Removes attribute `key` at the next commit; returns its value, if it had one.
    ///
    /// # Errors
    ///
    /// [`Error::Poisoned`] on a poisoned writer.
    pub fn remove_attribute(&mut self, key: &str) -> Result<Option<serde_json::Value>> {
        self.check_poisoned()?;
        Ok(self.core().attributes.remove(key))
    }

    /// The attributes the next commit writes: the last commit's, with the changes since.
    pub fn attributes(&self) -> Attributes {
        self.core().attributes.clone()
    }
}
