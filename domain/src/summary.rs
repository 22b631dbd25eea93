//! A run's result in a few lines for people, whatever its kind: what `iohr reliability
//! runs show` prints and the console shows. Checks results are not here: both show them
//! as a table of their own.

use serde::Deserialize;
use serde_json::Value;

use crate::capacity::CapacityResult;
use crate::faults::Journal;
use crate::load::LoadResult;
use crate::scenario_kind::record::ScenarioRecord;

/// The result's lines, when it is a capacity sweep, a load result, a faults journal or a
/// scenario record (its report per operation and the replay command, not its request
/// log); none for any other shape. Each is read from the value in place, not a copy.
pub fn result_lines(value: &Value) -> Option<Vec<String>> {
    CapacityResult::deserialize(value)
        .map(|capacity| capacity.summary())
        .or_else(|_| LoadResult::deserialize(value).map(|l| l.summary()))
        .or_else(|_| Journal::deserialize(value).map(|j| j.summary()))
        .or_else(|_| ScenarioRecord::deserialize(value).map(|r| r.lines()))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_shapes_have_no_lines() {
        assert!(result_lines(&serde_json::json!({"passed": true})).is_none());
        assert!(result_lines(&Value::Null).is_none());
    }
}
