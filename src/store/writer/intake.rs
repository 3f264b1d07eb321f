//! Taking values in: every limit is checked (the schema, and the chunk-id budget on a next-fit
//! projection of each append task's open chunk) before a record's index is taken; then its
//! bytes are copied into the open job and its table op is logged. No waiting, no I/O.
//!
//! The chunk-id limit (65,535) is checked on [`NextFit`] over logical lengths, an upper bound of
//! stored lengths (next fit is monotone in value sizes), so a task can never run out of ids for
//! a record the writer accepted; the projection restarts from the tasks' real state at each
//! commit ([`Writer::resync`]).

use super::oplog::Op;
use super::placement::NextFit;
use super::task::Item;
use super::{task_gone, Writer};
use crate::error::{Error, Result};
use crate::format::MAX_CHUNKS;
use crate::store::schema::check_record;
use std::ops::Range;

impl Writer {
    /// Checks a record's values for `positions` (field numbers) against the schema and the
    /// chunk-id budget, on `proj` (the projections, updated on success), without taking it.
    fn check_values<B: AsRef<[u8]>>(
        &self,
        positions: impl Iterator<Item = usize> + Clone,
        values: &[B],
        p: &mut NextFit,
        projected_new: &mut u64,
    ) -> Result<()> {
        for (f, v) in positions.clone().zip(values) {
            let meta = self.field_metas.get(f).ok_or_else(|| Error::UnknownField {
                field: format!("#{f}"),
            })?;
            check_record(meta, v.as_ref())?;
        }
        for v in values {
            if p.add(v.as_ref().len() as u64) {
                *projected_new += 1;
            }
        }
        if *projected_new > self.free_ids {
            return Err(Error::TooManyChunks { max: MAX_CHUNKS });
        }
        Ok(())
    }

    /// [`Writer::check_values`] for the open job's task; its projection is updated on success.
    pub(super) fn check_for_open_job<B: AsRef<[u8]>>(
        &mut self,
        positions: impl Iterator<Item = usize> + Clone,
        values: &[B],
    ) -> Result<()> {
        let task = self.open_task;
        let mut p = self.projections.get(task).copied().ok_or_else(task_gone)?;
        let mut new = self.projected_new;
        self.check_values(positions, values, &mut p, &mut new)?;
        if let Some(slot) = self.projections.get_mut(task) {
            *slot = p;
        }
        self.projected_new = new;
        Ok(())
    }

    /// Copies checked values into the open job and logs `op`; moves a full job to the outbox.
    pub(super) fn take_values<B: AsRef<[u8]>>(
        &mut self,
        positions: impl Iterator<Item = usize>,
        values: &[B],
        op: Op,
    ) {
        for (f, v) in positions.zip(values) {
            let v = v.as_ref();
            self.sample(f, v);
            let codec = self.field_metas.get(f).map(|m| m.codec).unwrap_or_default();
            self.open.data.extend_from_slice(v);
            self.open.items.push(Item {
                len: v.len() as u32,
                field: f as u32,
                codec,
            });
        }
        self.ops.push_back(op);
        if self.open.data.len() >= self.config.write_buffer_bytes {
            self.close_open_job();
        }
    }

    /// The ticket of the open job.
    pub(super) fn open_ticket(&self) -> u64 {
        self.next_ticket
    }

    /// Accepts a whole record (every field) as record `self.len`.
    pub(super) fn accept_record<B: AsRef<[u8]>>(&mut self, fields: &[B]) -> Result<u64> {
        if fields.len() != self.field_metas.len() {
            return Err(Error::FieldCount {
                expected: self.field_metas.len(),
                actual: fields.len(),
            });
        }
        if self.len >= crate::format::MAX_RECORDS {
            return Err(Error::TooManyRecords {
                max: crate::format::MAX_RECORDS,
            });
        }
        self.check_for_open_job(0..fields.len(), fields)?;
        let index = self.len;
        let op = Op::Set {
            index,
            field: None,
            ticket: self.open_ticket(),
        };
        self.take_values(0..fields.len(), fields, op);
        self.len += 1;
        Ok(index)
    }

    /// Checks every record of a batch, as if appended one after another, before any is taken.
    pub(super) fn check_many<R: AsRef<[B]>, B: AsRef<[u8]>>(&self, records: &[R]) -> Result<()> {
        self.check_rows(records.len(), |i, out| {
            out.clear();
            if let Some(r) = records.get(i) {
                out.extend(r.as_ref().iter().map(AsRef::as_ref));
            }
            Ok(())
        })
    }

    /// Checks `n` records, as if appended one after another, before any is taken; `row(i, out)`
    /// puts record `i`'s values into `out` (one buffer reused for every record).
    pub(super) fn check_rows<'v>(
        &self,
        n: usize,
        mut row: impl FnMut(usize, &mut Vec<&'v [u8]>) -> Result<()>,
    ) -> Result<()> {
        if (n as u64) > crate::format::MAX_RECORDS.saturating_sub(self.len) {
            return Err(Error::TooManyRecords {
                max: crate::format::MAX_RECORDS,
            });
        }
        let mut proj = self.projections.clone();
        let mut new = self.projected_new;
        let mut task = self.open_task;
        let mut bytes = self.open.data.len();
        let fields = self.field_metas.len();
        let mut values = Vec::with_capacity(fields);
        for i in 0..n {
            row(i, &mut values)?;
            if values.len() != fields {
                return Err(Error::FieldCount {
                    expected: fields,
                    actual: values.len(),
                });
            }
            let p = proj.get_mut(task).ok_or_else(task_gone)?;
            self.check_values(0..fields, &values, p, &mut new)?;
            bytes += values.iter().map(|v| v.len()).sum::<usize>();
            if bytes >= self.config.write_buffer_bytes {
                bytes = 0;
                task = (task + 1) % self.tasks.len().max(1);
            }
        }
        Ok(())
    }

    pub(super) fn accept_many<R: AsRef<[B]>, B: AsRef<[u8]>>(
        &mut self,
        records: &[R],
    ) -> Result<Range<u64>> {
        self.check_many(records)?;
        let start = self.len;
        for r in records {
            // Checked above, as a batch: this cannot fail.
            self.accept_record(r.as_ref())?;
        }
        Ok(start..self.len)
    }

    /// After a commit: the projections restart from what the tasks report.
    pub(super) fn resync(&mut self, sizes: Vec<Option<u64>>) {
        let limit = self.shared.chunk_size_bytes;
        for (p, s) in self.projections.iter_mut().zip(sizes) {
            *p = NextFit::new(limit, s);
        }
        self.projected_new = 0;
        let used = self.shared.book().sizes.len() as u64;
        self.free_ids = u64::from(MAX_CHUNKS).saturating_sub(used);
    }
}
