//! The WebSocket stream's messages: what a client may send (parsed strictly, every
//! refusal a code and a message that names the field) and what the server sends back.
//! Every message carries a `topic`: `frames` (a run's frames, resumed after a frame
//! number) or `events` (the account's product events, resumed after an event seq).

use serde_json::{Map, Value, json};

use crate::store::{EventRow, StoredFrame};

/// The longest run id a message may name; ids are UUIDs (36 characters).
pub const MAX_RUN_ID_BYTES: usize = 128;

/// The topic a subscription follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topic {
    /// A run's frames, numbered from 1, resumed after a frame number.
    Frames,
    /// The account's events, numbered by `seq` from 1, resumed after a seq.
    Events,
}

impl Topic {
    pub fn as_str(self) -> &'static str {
        match self {
            Topic::Frames => "frames",
            Topic::Events => "events",
        }
    }
}

/// A client's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `{"op":"subscribe","run":ID,"after":N}`: the run's frames after N (0: all).
    Subscribe { run: String, after: u64 },
    /// `{"op":"unsubscribe","run":ID}`.
    Unsubscribe { run: String },
    /// `{"op":"subscribe","topic":"events","after":SEQ}`: the account's events after SEQ.
    SubscribeEvents { after: u64 },
    /// `{"op":"unsubscribe","topic":"events"}`.
    UnsubscribeEvents,
}

/// A refused message or subscription, sent as `{"type":"error",...}`; the connection
/// stays open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: &'static str,
    pub message: String,
    /// The run the message named, when it named one readably.
    pub run: Option<String>,
}

impl Refusal {
    pub fn new(code: &'static str, message: impl Into<String>, run: Option<&str>) -> Refusal {
        Refusal {
            code,
            message: message.into(),
            run: run.map(str::to_string),
        }
    }

    fn invalid(message: impl Into<String>, run: Option<&str>) -> Refusal {
        Refusal::new("invalid_message", message, run)
    }

    pub fn to_message(&self) -> Value {
        let mut error = json!({"type": "error", "code": self.code, "message": self.message});
        if let Some(run) = &self.run {
            error["topic"] = json!(Topic::Frames.as_str());
            error["run"] = json!(run);
        }
        error
    }
}

/// Parses one text message of a client.
pub fn parse(text: &str) -> Result<Request, Refusal> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| Refusal::new("malformed_json", format!("not JSON: {e}"), None))?;
    let Value::Object(fields) = value else {
        return Err(Refusal::invalid(
            "a message is a JSON object with an op",
            None,
        ));
    };
    // The run first, so that every later refusal can name it.
    let run = match fields.get("run") {
        Some(Value::String(run)) if !run.is_empty() && run.len() <= MAX_RUN_ID_BYTES => {
            Some(run.as_str())
        }
        _ => None,
    };
    let op = match fields.get("op") {
        Some(Value::String(op)) if op == "subscribe" || op == "unsubscribe" => op.as_str(),
        Some(_) => {
            return Err(Refusal::invalid(
                "op must be \"subscribe\" or \"unsubscribe\"",
                run,
            ));
        }
        None => return Err(Refusal::invalid("op is missing", run)),
    };
    match fields.get("topic") {
        None => {}
        Some(Value::String(topic)) if topic == "frames" => {}
        Some(Value::String(topic)) if topic == "events" => return events(op, &fields),
        Some(_) => {
            return Err(Refusal::invalid(
                "topic must be \"frames\" or \"events\"",
                run,
            ));
        }
    }
    let allowed: &[&str] = if op == "subscribe" {
        &["op", "topic", "run", "after"]
    } else {
        &["op", "topic", "run"]
    };
    if let Some(unknown) = fields.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(Refusal::invalid(
            format!("unknown field {unknown:?} in {op}"),
            run,
        ));
    }
    let Some(run) = run else {
        return Err(Refusal::invalid(
            format!("run must be a run id (1 to {MAX_RUN_ID_BYTES} bytes)"),
            None,
        ));
    };
    if op == "unsubscribe" {
        return Ok(Request::Unsubscribe {
            run: run.to_string(),
        });
    }
    let after = after(&fields).ok_or_else(|| {
        Refusal::invalid(
            "after must be a frame number (0 or more; 0 or absent: from the first)",
            Some(run),
        )
    })?;
    Ok(Request::Subscribe {
        run: run.to_string(),
        after,
    })
}

/// A message of the `events` topic: no run, `after` an event seq.
fn events(op: &str, fields: &Map<String, Value>) -> Result<Request, Refusal> {
    let allowed: &[&str] = if op == "subscribe" {
        &["op", "topic", "after"]
    } else {
        &["op", "topic"]
    };
    if let Some(unknown) = fields.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(Refusal::invalid(
            format!("unknown field {unknown:?} in {op} of topic events"),
            None,
        ));
    }
    if op == "unsubscribe" {
        return Ok(Request::UnsubscribeEvents);
    }
    let after = after(fields).ok_or_else(|| {
        Refusal::invalid(
            "after must be an event seq (0 or more; 0 or absent: from the first)",
            None,
        )
    })?;
    Ok(Request::SubscribeEvents { after })
}

fn after(fields: &Map<String, Value>) -> Option<u64> {
    match fields.get("after") {
        None | Some(Value::Null) => Some(0),
        Some(value) => value.as_u64(),
    }
}

/// `{"type":"subscribed",...}`: frames of `run` after `after` follow.
pub fn subscribed(run: &str, after: u64) -> Value {
    json!({"type": "subscribed", "topic": Topic::Frames.as_str(), "run": run, "after": after})
}

/// `{"type":"unsubscribed",...}`: no frame of `run` follows.
pub fn unsubscribed(run: &str) -> Value {
    json!({"type": "unsubscribed", "topic": Topic::Frames.as_str(), "run": run})
}

/// One frame: `id` and `event` are the SSE event's id and name, `frame` its data.
pub fn frame(frame: &StoredFrame) -> Value {
    json!({
        "type": "frame",
        "topic": Topic::Frames.as_str(),
        "run": frame.run_id,
        "id": frame.number,
        "event": frame.kind,
        "frame": frame.to_api(),
    })
}

/// The run's stream is over (where the SSE stream closes): after its `finished` frame,
/// or at once for a subscription that resumed past it. `last` is the last frame number
/// sent (or the `after` resumed from).
pub fn end(run: &str, last: u64) -> Value {
    json!({"type": "end", "topic": Topic::Frames.as_str(), "run": run, "last": last})
}

/// `{"type":"subscribed","topic":"events",...}`: the account's events after `after`.
pub fn events_subscribed(after: u64) -> Value {
    json!({"type": "subscribed", "topic": Topic::Events.as_str(), "after": after})
}

/// `{"type":"unsubscribed","topic":"events"}`: no event follows.
pub fn events_unsubscribed() -> Value {
    json!({"type": "unsubscribed", "topic": Topic::Events.as_str()})
}

/// One event: `id` and `event` are the SSE feed's id (the seq) and name (the type),
/// `data` its data (the event as every surface shows it).
pub fn event(event: &EventRow) -> Value {
    json!({
        "type": "event",
        "topic": Topic::Events.as_str(),
        "id": event.seq,
        "event": event.event_type,
        "data": event.body(),
    })
}

/// The events stopped (the controller stops, or the store failed): subscribe again
/// after `last`.
pub fn events_end(last: u64) -> Value {
    json!({"type": "end", "topic": Topic::Events.as_str(), "last": last})
}

#[cfg(test)]
mod tests;
