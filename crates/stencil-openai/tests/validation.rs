//! Request validation on random bodies (the fuzz target's generator, seeded): no panic, and
//! every rejection is a 4xx that names the field. The fuzz target runs the same check longer.

mod bodies;

#[test]
fn random_bodies_are_accepted_or_rejected_with_a_param() {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut accepted, mut rejected) = (0, 0);
    for _ in 0..20_000 {
        let len = (next() % 96) as usize;
        let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let body = bodies::body(&data);
        bodies::check(&body);
        match stencil_openai::request::chat_request(&body) {
            Ok(_) => accepted += 1,
            Err(_) => rejected += 1,
        }
    }
    // The generator reaches both outcomes (a generator that only makes garbage proves little).
    assert!(
        accepted > 0 && rejected > 0,
        "{accepted} accepted, {rejected} rejected"
    );
}
