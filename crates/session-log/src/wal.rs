//! The intent WAL ([`IntentWal`]): a small write-ahead file beside the redb file
//! (`STATE_DIR/session.wal`) that makes a durable append cost one overwrite of a few
//! hundred bytes and one `fdatasync`, instead of a redb durable commit (several B-tree
//! pages and a header before its sync). Not to be confused with the host's own record of
//! a call: this is the session log's private write-ahead file.
//!
//! This module owns the WAL's byte format and its parsing. It must not decide when
//! events reach redb: that is `wal_mode.rs` (checkpoints).
//!
//! # Format
//!
//! The file is a sequence of records from offset 0, followed by zeros up to its length
//! (the file is grown in zero-filled steps, so that appending a record overwrites
//! allocated blocks and its `fdatasync` has no file size to journal). A record is
//!
//! ```text
//! magic "THW1" | payload length: u32 LE | CRC-32 of the payload: u32 LE | payload
//! payload = count: u32 LE, then count × (seq: u64 LE | length: u32 LE | event bytes)
//! ```
//!
//! where the event bytes are exactly what the events table stores for that sequence
//! number. Reading stops at the first record that is not whole and intact (wrong magic,
//! length past the end, CRC mismatch, undecodable payload) or whose first sequence number
//! does not follow the previous record's last: a torn last write, the zeros after the
//! records, or stale records of an earlier round behind the current ones all end the
//! WAL there. Sequence numbers inside a record are consecutive.

use std::io;
use std::sync::Arc;

use crate::event::EventKind;
use crate::storage::Storage;

/// The magic of a record (format 1 of the intent WAL).
const MAGIC: [u8; 4] = *b"THW1";

/// Bytes of a record header: magic, payload length, CRC.
const HEADER: usize = 12;

/// The WAL file is grown in steps of this many zero bytes.
pub(crate) const GROW_STEP: u64 = 1 << 20;

/// A WAL file longer than this (grown by a large record) is cut back to
/// [`GROW_STEP`] when a round ends.
pub(crate) const SHRINK_ABOVE: u64 = 2 * GROW_STEP;

/// One event ready for the events table: its sequence number, the two facts the indexes
/// need, and its stored bytes.
#[derive(Debug, Clone)]
pub(crate) struct Staged {
    pub(crate) seq: u64,
    pub(crate) call_id: String,
    pub(crate) kind: EventKind,
    pub(crate) bytes: Vec<u8>,
}

/// The events of a WAL's intact records as `(seq, stored bytes)`, in order, and the
/// offset where those records end.
pub(crate) type Parsed = (Vec<(u64, Vec<u8>)>, u64);

/// Why a record cannot be encoded (nothing was written).
#[derive(Debug)]
pub(crate) enum EncodeError {
    /// No events: a record without events would end the WAL on replay.
    Empty,
    /// The record would be larger than 4 GiB.
    TooBig,
}

impl std::fmt::Display for EncodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EncodeError::Empty => "an intent WAL record needs at least one event",
            EncodeError::TooBig => "an intent WAL record would be larger than 4 GiB",
        })
    }
}

/// The encoding of one record holding `events` (at least one, consecutive sequence
/// numbers).
pub(crate) fn encode_record(events: &[&Staged]) -> Result<Vec<u8>, EncodeError> {
    if events.is_empty() {
        return Err(EncodeError::Empty);
    }
    let too_big = || EncodeError::TooBig;
    let payload_len = 4 + events.iter().map(|e| 12 + e.bytes.len()).sum::<usize>();
    // One buffer: the header is filled in once the payload is there.
    let mut record = Vec::with_capacity(HEADER + payload_len);
    record.extend_from_slice(&[0; HEADER]);
    record.extend_from_slice(
        &u32::try_from(events.len())
            .map_err(|_| too_big())?
            .to_le_bytes(),
    );
    for e in events {
        record.extend_from_slice(&e.seq.to_le_bytes());
        record.extend_from_slice(
            &u32::try_from(e.bytes.len())
                .map_err(|_| too_big())?
                .to_le_bytes(),
        );
        record.extend_from_slice(&e.bytes);
    }
    let len = u32::try_from(payload_len).map_err(|_| too_big())?;
    let crc = crc32fast::hash(&record[HEADER..]);
    record[..4].copy_from_slice(&MAGIC);
    record[4..8].copy_from_slice(&len.to_le_bytes());
    record[8..12].copy_from_slice(&crc.to_le_bytes());
    Ok(record)
}

/// The events of the WAL's intact records, in order, as `(seq, stored bytes)`, and the
/// offset where the intact records end. Never fails on content: whatever is not an intact
/// continuation ends the WAL (see the module documentation).
pub(crate) fn parse(bytes: &[u8]) -> Parsed {
    let read = |at: u64, out: &mut [u8]| {
        let start = usize::try_from(at).map_err(io::Error::other)?;
        let src = bytes
            .get(start..start + out.len())
            .ok_or_else(|| io::Error::other("read past the end"))?;
        out.copy_from_slice(src);
        Ok(())
    };
    parse_with(bytes.len() as u64, read).unwrap_or_default()
}

/// [`parse`] over a file of `len` bytes read through `read(offset, out)`, one record at
/// a time: nothing is allocated beyond one record, and a record is read only when its
/// header says it fits in the file. Fails only when `read` does.
fn parse_with(
    len: u64,
    mut read: impl FnMut(u64, &mut [u8]) -> io::Result<()>,
) -> io::Result<Parsed> {
    let mut events = Vec::new();
    let mut at = 0u64;
    let mut expected: Option<u64> = None;
    while let Some(start) = at.checked_add(HEADER as u64).filter(|s| *s <= len) {
        let mut header = [0u8; HEADER];
        read(at, &mut header)?;
        let [m0, m1, m2, m3, l0, l1, l2, l3, c0, c1, c2, c3] = header;
        if [m0, m1, m2, m3] != MAGIC {
            break;
        }
        let payload_len = u64::from(u32::from_le_bytes([l0, l1, l2, l3]));
        let Some(end) = start.checked_add(payload_len).filter(|e| *e <= len) else {
            break;
        };
        let mut payload = vec![0u8; usize::try_from(payload_len).map_err(io::Error::other)?];
        read(start, &mut payload)?;
        if crc32fast::hash(&payload) != u32::from_le_bytes([c0, c1, c2, c3]) {
            break;
        }
        let Some(payload_events) = parse_payload(&payload) else {
            break;
        };
        let Some(&(first, _)) = payload_events.first() else {
            break;
        };
        if expected.is_some_and(|want| want != first) {
            break;
        }
        expected = payload_events
            .last()
            .and_then(|(last, _)| last.checked_add(1));
        events.extend(payload_events.into_iter().map(|(seq, b)| (seq, b.to_vec())));
        at = end;
        if expected.is_none() {
            break;
        }
    }
    Ok((events, at))
}

/// The events of a payload; `None` if it is malformed or its sequence numbers are not
/// consecutive.
fn parse_payload(payload: &[u8]) -> Option<Vec<(u64, &[u8])>> {
    let count = u32::from_le_bytes(payload.get(..4)?.try_into().ok()?);
    let mut at = 4usize;
    let mut events: Vec<(u64, &[u8])> = Vec::new();
    for _ in 0..count {
        let seq = u64::from_le_bytes(payload.get(at..at + 8)?.try_into().ok()?);
        let len = usize::try_from(u32::from_le_bytes(
            payload.get(at + 8..at + 12)?.try_into().ok()?,
        ))
        .ok()?;
        let start = at + 12;
        let end = start.checked_add(len)?;
        if let Some(&(prev, _)) = events.last()
            && prev.checked_add(1) != Some(seq)
        {
            return None;
        }
        events.push((seq, payload.get(start..end)?));
        at = end;
    }
    (at == payload.len()).then_some(events)
}

/// The intent WAL file: where the next record goes, and how far the file is zero-filled.
pub(crate) struct IntentWal {
    storage: Arc<dyn Storage>,
    /// The end of the records of the current round.
    len: u64,
    /// The length of the file (every byte after `len` is zero or a stale record).
    capacity: u64,
}

impl std::fmt::Debug for IntentWal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntentWal")
            .field("len", &self.len)
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl IntentWal {
    /// Wraps the WAL's storage; its content is read with [`IntentWal::read_records`].
    pub(crate) fn new(storage: Box<dyn Storage>) -> io::Result<IntentWal> {
        let capacity = storage.len()?;
        Ok(IntentWal {
            storage: Arc::from(storage),
            len: 0,
            capacity,
        })
    }

    /// The events of the file's intact records and where they end (see [`parse`]),
    /// read one record at a time.
    pub(crate) fn read_records(&self) -> io::Result<Parsed> {
        parse_with(self.capacity, |at, out| self.storage.read(at, out))
    }

    /// The bytes of records written in the current round.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// The file's length: records, then zeros.
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Declares that the current round's records end at `end` (after reading them at
    /// open), so that [`IntentWal::reset`] clears them.
    pub(crate) fn set_round_end(&mut self, end: u64) {
        self.len = end.min(self.capacity);
    }

    /// Writes one record after the current round's records, without syncing it: it is
    /// durable once a later [`Storage::sync_data`] of the storage (see
    /// [`IntentWal::storage`]) returns (the file is grown first when the record does not
    /// fit, which that same sync makes durable).
    pub(crate) fn write_record(&mut self, record: &[u8]) -> io::Result<()> {
        let end = self
            .len
            .checked_add(record.len() as u64)
            .ok_or_else(|| io::Error::other("intent WAL offset overflow"))?;
        if end > self.capacity {
            self.grow(end)?;
        }
        self.storage.write(self.len, record)?;
        self.len = end;
        Ok(())
    }

    /// The WAL's storage, so that it can be synced without holding the WAL (group
    /// commit: `wal_mode.rs`). Only `sync_data` may be called through it.
    pub(crate) fn storage(&self) -> Arc<dyn Storage> {
        Arc::clone(&self.storage)
    }

    /// Grows the file with written zeros to hold at least `needed` bytes.
    fn grow(&mut self, needed: u64) -> io::Result<()> {
        let new_capacity = needed.div_ceil(GROW_STEP).saturating_mul(GROW_STEP);
        self.storage.set_len(new_capacity)?;
        self.zero(self.capacity, new_capacity)?;
        self.capacity = new_capacity;
        Ok(())
    }

    /// Writes zeros over `from..to` (so that the blocks are allocated, not holes).
    fn zero(&self, from: u64, to: u64) -> io::Result<()> {
        let chunk = vec![0u8; 64 * 1024];
        let mut at = from;
        while at < to {
            let n = usize::try_from((to - at).min(chunk.len() as u64)).map_err(io::Error::other)?;
            self.storage.write(at, &chunk[..n])?;
            at += n as u64;
        }
        Ok(())
    }

    /// Makes the file ready to hold records (zero-filled to at least one growth step) and
    /// durable; used once when the WAL is opened.
    pub(crate) fn prepare(&mut self) -> io::Result<()> {
        if self.capacity < GROW_STEP {
            self.grow(GROW_STEP)?;
            self.storage.sync_data()?;
        }
        Ok(())
    }

    /// Starts a new round: every record so far is in the database durably. The records
    /// are overwritten with zeros (not synced: a crash may bring stale records back, and
    /// their events are then already in the database, byte for byte). A file that one
    /// large record grew past [`SHRINK_ABOVE`] is cut back to one growth step.
    pub(crate) fn reset(&mut self) -> io::Result<()> {
        let used = self.len;
        self.len = 0;
        if self.capacity > SHRINK_ABOVE {
            self.zero(0, used.min(GROW_STEP))?;
            self.storage.set_len(GROW_STEP)?;
            self.capacity = GROW_STEP;
            return Ok(());
        }
        self.zero(0, used)
    }
}

impl Drop for IntentWal {
    /// Releases the storage (its lock).
    fn drop(&mut self) {
        let _ = self.storage.close();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests fail loudly on a set-up error")]
mod tests {
    use super::*;

    fn staged(seq: u64, body: &str) -> Staged {
        Staged {
            seq,
            call_id: "c".into(),
            kind: EventKind::ToolIntent,
            bytes: body.as_bytes().to_vec(),
        }
    }

    fn record(events: &[Staged]) -> Vec<u8> {
        encode_record(&events.iter().collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn records_round_trip_and_zeros_end_the_wal() {
        let mut file = record(&[staged(1, "a"), staged(2, "bb")]);
        file.extend(record(&[staged(3, "ccc")]));
        file.extend(vec![0; 100]);
        let (parsed, end) = parse(&file);
        assert_eq!(end as usize, file.len() - 100);
        assert_eq!(
            parsed,
            vec![
                (1, b"a".to_vec()),
                (2, b"bb".to_vec()),
                (3, b"ccc".to_vec())
            ]
        );
    }

    #[test]
    fn a_torn_or_corrupt_record_ends_the_wal_before_it() {
        let first = record(&[staged(1, "a")]);
        let second = record(&[staged(2, "bb")]);
        let mut file = first.clone();
        file.extend(&second);
        for cut in first.len()..file.len() {
            assert_eq!(parse(&file[..cut]).0.len(), 1, "cut at {cut}");
        }
        for i in first.len()..file.len() {
            let mut flipped = file.clone();
            flipped[i] ^= 0x40;
            assert_eq!(parse(&flipped).0.len(), 1, "flipped byte {i}");
        }
    }

    #[test]
    fn a_record_that_does_not_continue_the_sequence_ends_the_wal() {
        let mut file = record(&[staged(7, "new")]);
        // A stale record of an earlier round behind the current one.
        file.extend(record(&[staged(3, "stale")]));
        assert_eq!(parse(&file).0, vec![(7, b"new".to_vec())]);
        // Non-consecutive sequence numbers inside a record: not a record of ours.
        assert!(
            parse(&record(&[staged(1, "a"), staged(3, "b")]))
                .0
                .is_empty()
        );
    }

    #[test]
    fn an_empty_record_is_refused() {
        assert!(matches!(encode_record(&[]), Err(EncodeError::Empty)));
    }

    #[test]
    fn a_length_past_the_end_of_the_file_ends_the_wal_without_reading_it() {
        let first = record(&[staged(1, "a")]);
        let mut file = first.clone();
        file.extend_from_slice(&MAGIC);
        file.extend_from_slice(&u32::MAX.to_le_bytes());
        file.extend_from_slice(&[0; 4]);
        let mut largest_read = 0;
        let parsed = parse_with(file.len() as u64, |at, out| {
            largest_read = largest_read.max(out.len());
            let start = at as usize;
            out.copy_from_slice(&file[start..start + out.len()]);
            Ok(())
        })
        .unwrap();
        assert_eq!(parsed, (vec![(1, b"a".to_vec())], first.len() as u64));
        assert!(
            largest_read < first.len(),
            "read {largest_read} bytes at once"
        );
    }

    #[test]
    fn garbage_never_panics() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..400 {
            let mut bytes = record(&[staged(1, "abc")]);
            bytes.truncate(len % (bytes.len() + 1));
            for _ in 0..len {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                bytes.push(seed as u8);
            }
            if len % 3 == 0 && bytes.len() >= 4 {
                bytes[..4].copy_from_slice(&MAGIC);
            }
            let _ = parse(&bytes);
        }
    }
}
