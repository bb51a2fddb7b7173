//! Giving back the room of a map once a burst is over. A `HashMap` keeps the table its largest
//! moment needed: after a fan-out of 100,000 copies, every map keyed by copy stays that large
//! for as long as the process runs, though it holds a handful of entries.

use std::collections::HashMap;
use std::hash::Hash;

/// Shrinks `map` to twice what it holds once it holds under a quarter of its room: each shrink
/// follows a fall to a quarter, so the cost stays in proportion to the removals.
pub fn shrink_if_sparse<K: Hash + Eq, V, S: std::hash::BuildHasher>(map: &mut HashMap<K, V, S>) {
    if map.capacity() > 64 && map.len() < map.capacity() / 4 {
        map.shrink_to(map.len() * 2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_emptied_after_a_burst_gives_its_room_back() {
        let mut map: HashMap<u32, u32> = (0..10_000).map(|i| (i, i)).collect();
        let burst = map.capacity();
        map.retain(|k, _| *k < 1_000);
        shrink_if_sparse(&mut map);
        assert!(
            map.capacity() >= 1_000 && map.capacity() <= burst / 4,
            "{} of {burst}",
            map.capacity()
        );
        let room = map.capacity();
        map.retain(|k, _| *k < 900);
        shrink_if_sparse(&mut map);
        assert_eq!(
            map.capacity(),
            room,
            "over a quarter full, the room stays for the next burst"
        );
        map.clear();
        shrink_if_sparse(&mut map);
        assert!(map.capacity() <= 64);
    }
}
