//! The assignment step of every tracker: tracks against detections by IoU, solved exactly.
//!
//! A pair may match only when its IoU reaches the stage's threshold `min_iou` (and the
//! classes agree: the caller gives such pairs IoU 0). Among those, the assignment maximises
//! the sum of `IoU - min_iou` over the matched pairs, which is the same optimum as
//! ByteTrack's `lap.lapjv(1 - IoU, extend_cost=True, cost_limit=1 - min_iou)`: with the cost
//! limit `L`, every unmatched row and column costs `L / 2`, so matching a pair of cost
//! `c = 1 - IoU` saves `L - c = IoU - min_iou`. The solver is `pathfinding`'s Kuhn-Munkres
//! (Hungarian, O(n³)) on integer weights: the gain scaled by 10⁶ and rounded, so two
//! assignments whose sums differ by less than 10⁻⁶ IoU may tie.

use pathfinding::kuhn_munkres::kuhn_munkres;
use pathfinding::matrix::Matrix;

/// Scale of the integer weights: IoU gains are counted in millionths.
const SCALE: f32 = 1_000_000.0;

/// The best matching of `rows` x `cols` pairs whose IoU is `iou(r, c)` (0..=1): the pairs
/// `(row, col)` matched, each with IoU >= `min_iou`, each row and column at most once,
/// maximising the sum of `IoU - min_iou`. Sorted by row. Empty when either side is.
pub(crate) fn match_iou(
    rows: usize,
    cols: usize,
    min_iou: f32,
    iou: impl Fn(usize, usize) -> f32,
) -> Vec<(usize, usize)> {
    if rows == 0 || cols == 0 {
        return vec![];
    }
    // Kuhn-Munkres assigns every row, so it wants rows <= columns: transpose if needed.
    let transpose = rows > cols;
    let (n, m) = if transpose { (cols, rows) } else { (rows, cols) };
    let gain = |r: usize, c: usize| {
        let v = if transpose { iou(c, r) } else { iou(r, c) };
        if v.is_finite() && v >= min_iou {
            ((v - min_iou) * SCALE).round() as i64 + 1
        } else {
            0
        }
    };
    let mut w = Vec::with_capacity(n * m);
    for r in 0..n {
        for c in 0..m {
            w.push(gain(r, c));
        }
    }
    let Ok(weights) = Matrix::from_vec(n, m, w) else { return vec![] };
    let (_, assigned) = kuhn_munkres(&weights);
    let mut out: Vec<(usize, usize)> = assigned
        .into_iter()
        .enumerate()
        // A weight of 0 is a pair below the threshold: the solver had to place the row somewhere.
        .filter(|&(r, c)| weights[(r, c)] > 0)
        .map(|(r, c)| if transpose { (c, r) } else { (r, c) })
        .collect();
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every matching of a small problem, tried one by one: the best sum of gains.
    fn brute(rows: usize, cols: usize, min_iou: f32, m: &[f32]) -> f32 {
        fn go(r: usize, rows: usize, cols: usize, used: &mut Vec<bool>, min_iou: f32, m: &[f32]) -> f32 {
            if r == rows {
                return 0.0;
            }
            let mut best = go(r + 1, rows, cols, used, min_iou, m);
            for c in 0..cols {
                let v = m[r * cols + c];
                if !used[c] && v >= min_iou {
                    used[c] = true;
                    best = best.max(v - min_iou + go(r + 1, rows, cols, used, min_iou, m));
                    used[c] = false;
                }
            }
            best
        }
        go(0, rows, cols, &mut vec![false; cols], min_iou, m)
    }

    #[test]
    fn the_best_matching_not_the_greedy_one() {
        // Greedy takes (0,0) at 0.9 and leaves row 1 with nothing above 0.5; the optimum
        // is (0,1) + (1,0): 0.8 + 0.85 against 0.9 alone.
        let m = [0.9, 0.8, 0.85, 0.1];
        assert_eq!(match_iou(2, 2, 0.5, |r, c| m[r * 2 + c]), vec![(0, 1), (1, 0)]);
        // Below the threshold nothing matches, even when the solver must place a row.
        assert_eq!(match_iou(2, 2, 0.95, |r, c| m[r * 2 + c]), vec![]);
        assert_eq!(match_iou(0, 3, 0.5, |_, _| 1.0), vec![]);
        // More rows than columns (transposed inside).
        let t = [0.6, 0.9, 0.7];
        assert_eq!(match_iou(3, 1, 0.5, |r, _| t[r]), vec![(1, 0)]);
        // NaN never matches.
        assert_eq!(match_iou(1, 1, 0.0, |_, _| f32::NAN), vec![]);
    }

    #[test]
    fn optimal_on_random_problems_with_ties() {
        // A small linear congruential generator: the same problems every run.
        let mut s = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 33) as u32
        };
        for _ in 0..400 {
            let rows = 1 + (next() % 5) as usize;
            let cols = 1 + (next() % 5) as usize;
            // Values from a few levels, so many ties.
            let m: Vec<f32> = (0..rows * cols).map(|_| [0.0, 0.2, 0.5, 0.5, 0.7, 1.0][(next() % 6) as usize]).collect();
            let min_iou = [0.2, 0.5][(next() % 2) as usize];
            let got = match_iou(rows, cols, min_iou, |r, c| m[r * cols + c]);
            let sum: f32 = got.iter().map(|&(r, c)| m[r * cols + c] - min_iou).sum();
            let best = brute(rows, cols, min_iou, &m);
            assert!((sum - best).abs() < 1e-4, "{rows}x{cols} {m:?} min {min_iou}: got {got:?} = {sum}, best {best}");
            let mut rs: Vec<usize> = got.iter().map(|p| p.0).collect();
            let mut cs: Vec<usize> = got.iter().map(|p| p.1).collect();
            rs.dedup();
            cs.sort_unstable();
            cs.dedup();
            assert_eq!((rs.len(), cs.len()), (got.len(), got.len()), "each row and column once");
            assert!(got.iter().all(|&(r, c)| m[r * cols + c] >= min_iou));
        }
    }
}
