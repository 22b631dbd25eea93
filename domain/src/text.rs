//! Numbers as people read them in summaries and messages.

/// `x` with at most `decimals` decimals and no trailing zeros: `2`, `0.25`, `337.5`.
pub fn decimal(x: f64, decimals: usize) -> String {
    let text = format!("{x:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailing_zeros_and_a_bare_point_go() {
        assert_eq!(decimal(2.0, 3), "2");
        assert_eq!(decimal(0.25, 3), "0.25");
        assert_eq!(decimal(337.456, 2), "337.46");
        assert_eq!(decimal(120.0, 0), "120");
    }
}
