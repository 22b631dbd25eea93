use super::*;

#[test]
fn ids_and_values_cannot_change_the_route() {
    assert_eq!(segment("r_01-a.b~"), "r_01-a.b~");
    assert_eq!(segment("../x"), "..%2Fx");
    assert_eq!(segment(".."), "%2E%2E");
    assert_eq!(
        query(&[("before", Some("a&b=c".into())), ("noise_floor", None)]),
        "?before=a%26b%3Dc"
    );
    assert_eq!(query(&[("kind", None)]), "");
}
