//! Timelines of what doorbell's hosts, PCIe links, NICs and wire do, in
//! the Chrome trace-event format (JSON), which Perfetto UI
//! (ui.perfetto.dev) and chrome://tracing open.
//!
//! # Model
//! A [`Trace`] is a list of events on *tracks*. A track ([`Track`]) is a
//! `(pid, tid)` pair: the process groups the tracks of one machine (a host
//! with its cores, link directions and NIC units), the thread is one
//! resource on it. Each resource is busy in [slices](Trace::slice) that do
//! not overlap, or nest. Things that overlap in time on one resource, such
//! as the work requests a send queue holds at once, are *async spans*
//! ([`Trace::span`]): each has an id, and the spans of one id nest (a post
//! and its steps).
//!
//! # Guarantees
//! - Time is whatever the caller stamps: [`Instant`] in picoseconds from
//!   the start of the run, virtual time in the simulator and the wall clock
//!   in the live runtime. Nothing here reads a clock.
//! - The JSON ([`Trace::to_json`]) is an object with `traceEvents` (sorted
//!   by time, a slice before the slices it contains) and
//!   `displayTimeUnit` `"ns"`; `ts` and `dur` are microseconds with
//!   picosecond resolution, as the format wants.
//! - The same calls give the same bytes.
//!
//! # Driving it
//! Name the processes and tracks ([`Trace::name_process`],
//! [`Trace::name_track`]), add slices, spans and instants, then write
//! [`Trace::to_json`] where it should go.

#![deny(missing_docs)]
#![warn(unreachable_pub)]

use doorbell_types::Instant;
use serde::Serialize;
use serde_json::{Map, Value};

/// One resource's row in the timeline: a thread of a process, in the
/// format's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Track {
    /// The machine (or group) the track belongs to.
    pub pid: u32,
    /// The resource.
    pub tid: u32,
}

impl Track {
    /// Track `tid` of process `pid`.
    pub const fn new(pid: u32, tid: u32) -> Self {
        Self { pid, tid }
    }
}

/// Named values shown with an event.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Args(Map<String, Value>);

impl Args {
    /// No values.
    pub fn new() -> Self {
        Self::default()
    }

    /// These values and `key` = `value`.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.0.insert(key.to_string(), value.into());
        self
    }

    /// A QPN as the tools print it (`0x1a2b`).
    pub fn with_qpn(self, key: &str, qpn: u32) -> Self {
        self.with(key, format!("{qpn:#x}"))
    }

    fn into_value(self) -> Option<Value> {
        (!self.0.is_empty()).then_some(Value::Object(self.0))
    }
}

/// One event, as the format spells it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// What happened.
    pub name: String,
    /// A category: the kind of event (`post`, `step`, `tlp`, `dma`, …).
    pub cat: &'static str,
    /// The phase: `X` a slice, `b` and `e` the ends of an async span, `i`
    /// an instant, `M` a name.
    pub ph: &'static str,
    /// When, µs.
    pub ts: f64,
    /// How long (slices), µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dur: Option<f64>,
    /// The process.
    pub pid: u32,
    /// The thread (every phase but async spans).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    /// The async span's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// An instant's scope (`t`: its thread).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s: Option<&'static str>,
    /// Values shown with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    /// Position for sorting ([`Trace::push`]).
    #[serde(skip)]
    key: (u64, u8, u64, u8),
}

/// Where an event sorts among those at its time ([`Trace::push`]).
#[derive(Clone, Copy)]
enum Class {
    End,
    Open,
    ZeroEnd,
}

/// A timeline being recorded.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    meta: Vec<Event>,
    events: Vec<Event>,
}

fn us(ps: u64) -> f64 {
    ps as f64 / 1e6
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct File<'a> {
    trace_events: Vec<&'a Event>,
    display_time_unit: &'static str,
}

impl Trace {
    /// An empty trace.
    pub fn new() -> Self {
        Self::default()
    }

    fn meta(&mut self, name: &'static str, pid: u32, tid: Option<u32>, args: Value) {
        self.meta.push(Event {
            name: name.to_string(),
            cat: "__metadata",
            ph: "M",
            ts: 0.0,
            dur: None,
            pid,
            tid,
            id: None,
            s: None,
            args: Some(args),
            key: (0, 0, 0, 0),
        });
    }

    /// Names process `pid`; processes are shown by `sort` ascending.
    pub fn name_process(&mut self, pid: u32, name: &str, sort: u32) {
        self.meta(
            "process_name",
            pid,
            None,
            serde_json::json!({ "name": name }),
        );
        self.meta(
            "process_sort_index",
            pid,
            None,
            serde_json::json!({ "sort_index": sort }),
        );
    }

    /// Names `track`; the tracks of a process are shown by `sort` ascending.
    pub fn name_track(&mut self, track: Track, name: &str, sort: u32) {
        let t = Some(track.tid);
        self.meta(
            "thread_name",
            track.pid,
            t,
            serde_json::json!({ "name": name }),
        );
        self.meta(
            "thread_sort_index",
            track.pid,
            t,
            serde_json::json!({ "sort_index": sort }),
        );
    }

    /// Adds `e` at `at`. The file lists events by time; at one time, the
    /// ends of spans that took time come first, innermost (added last)
    /// first, then everything else in the order it was added, so an outer
    /// span or slice, added first, opens before what it contains. A span
    /// of no length ends right after it begins (`zero_end`).
    fn push(&mut self, mut e: Event, at: Instant, class: Class) {
        let n = self.events.len() as u64;
        e.key = match class {
            Class::End => (at.as_ps(), 0, u64::MAX - n, 0),
            Class::Open => (at.as_ps(), 1, n, 0),
            Class::ZeroEnd => (at.as_ps(), 1, n.saturating_sub(1), 1),
        };
        self.events.push(e);
    }

    /// `track` was busy with `name` from `start` to `end` (`end` before
    /// `start` is taken as `start`).
    pub fn slice(
        &mut self,
        track: Track,
        cat: &'static str,
        name: impl Into<String>,
        start: Instant,
        end: Instant,
        args: Args,
    ) {
        let len = end.as_ps().saturating_sub(start.as_ps());
        let e = Event {
            name: name.into(),
            cat,
            ph: "X",
            ts: us(start.as_ps()),
            dur: Some(us(len)),
            pid: track.pid,
            tid: Some(track.tid),
            id: None,
            s: None,
            args: args.into_value(),
            key: (0, 0, 0, 0),
        };
        self.push(e, start, Class::Open);
    }

    /// Something happened on `track` at `at`.
    pub fn instant(
        &mut self,
        track: Track,
        cat: &'static str,
        name: impl Into<String>,
        at: Instant,
        args: Args,
    ) {
        let e = Event {
            name: name.into(),
            cat,
            ph: "i",
            ts: us(at.as_ps()),
            dur: None,
            pid: track.pid,
            tid: Some(track.tid),
            id: None,
            s: Some("t"),
            args: args.into_value(),
            key: (0, 0, 0, 0),
        };
        self.push(e, at, Class::Open);
    }

    /// An async span of process `pid` with id `id` from `start` to `end`.
    /// Spans of one `cat` and id nest: add the outer one first.
    #[allow(clippy::too_many_arguments)]
    pub fn span(
        &mut self,
        pid: u32,
        cat: &'static str,
        id: u64,
        name: impl Into<String>,
        start: Instant,
        end: Instant,
        args: Args,
    ) {
        let end = end.max(start);
        let name = name.into();
        let len = end.as_ps() - start.as_ps();
        let id = Some(format!("{id:#x}"));
        let b = Event {
            name: name.clone(),
            cat,
            ph: "b",
            ts: us(start.as_ps()),
            dur: None,
            pid,
            tid: None,
            id: id.clone(),
            s: None,
            args: args.into_value(),
            key: (0, 0, 0, 0),
        };
        self.push(b, start, Class::Open);
        let e = Event {
            name,
            cat,
            ph: "e",
            ts: us(end.as_ps()),
            dur: None,
            pid,
            tid: None,
            id,
            s: None,
            args: None,
            key: (0, 0, 0, 0),
        };
        let class = if len == 0 { Class::ZeroEnd } else { Class::End };
        self.push(e, end, class);
    }

    /// Adds what `other` recorded after what this trace holds (its names
    /// too; a name given twice is harmless).
    pub fn append(&mut self, other: Trace) {
        self.meta.extend(other.meta);
        for mut e in other.events {
            // Re-number: the order among events at one time is kept.
            let n = self.events.len() as u64;
            e.key.2 = match (e.key.1, e.key.3) {
                (0, _) => u64::MAX - n,
                // The end of a span of no length sorts with its begin,
                // the event before it.
                (_, 1) => n.saturating_sub(1),
                _ => n,
            };
            self.events.push(e);
        }
    }

    /// Events recorded (names excluded).
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The events in the order the file lists them, names first.
    pub fn events(&self) -> Vec<&Event> {
        let mut ev: Vec<&Event> = self.events.iter().collect();
        ev.sort_by_key(|e| e.key);
        self.meta.iter().chain(ev).collect()
    }

    /// The trace as Chrome trace-event JSON.
    pub fn to_json(&self) -> Vec<u8> {
        let file = File {
            trace_events: self.events(),
            display_time_unit: "ns",
        };
        // Plain data with string keys: serialising cannot fail.
        serde_json::to_vec(&file).unwrap_or_default()
    }
}
