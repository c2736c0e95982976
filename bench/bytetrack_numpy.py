"""ByteTrack as a Python user runs it beside a PyTorch detector (the structure of the reference implementation,
ifzhang/ByteTrack's byte_tracker.py, in NumPy): a constant-velocity Kalman filter on (cx, cy, aspect, height),
high-score boxes matched first (IoU x score), low-score boxes second, unconfirmed tracks third, with the same
thresholds sluice's track stage uses by default. Assignment by scipy's linear_sum_assignment when SciPy is there
(what the reference's `lap` does), else greedy by IoU (said in `ASSIGNMENT`).

For the detection benchmark only (bench/detect_loop.py): the baseline's per-frame host work.
"""
import numpy as np

try:
    from scipy.optimize import linear_sum_assignment

    ASSIGNMENT = "scipy linear_sum_assignment"
except ImportError:  # pragma: no cover
    linear_sum_assignment = None
    ASSIGNMENT = "greedy (no SciPy)"

_STD_POS, _STD_VEL = 1.0 / 20, 1.0 / 160
_F = np.eye(8)
_F[:4, 4:] = np.eye(4)
_H = np.eye(4, 8)


def _to_xyah(b):
    w, h = b[2] - b[0], b[3] - b[1]
    return np.array([b[0] + w / 2, b[1] + h / 2, w / max(h, 1e-6), h])


def _to_xyxy(m):
    w = m[2] * m[3]
    return np.array([m[0] - w / 2, m[1] - m[3] / 2, m[0] + w / 2, m[1] + m[3] / 2])


class _Track:
    def __init__(self, box, score, cls, frame):
        h = box[3] - box[1]
        self.mean = np.r_[_to_xyah(box), 0, 0, 0, 0]
        std = [2 * _STD_POS * h, 2 * _STD_POS * h, 1e-2, 2 * _STD_POS * h,
               10 * _STD_VEL * h, 10 * _STD_VEL * h, 1e-5, 10 * _STD_VEL * h]
        self.cov = np.diag(np.square(std))
        self.score, self.cls, self.hits, self.last = score, cls, 1, frame
        self.id = 0
        self.confirmed = False

    def predict(self):
        h = self.mean[3]
        std = [_STD_POS * h, _STD_POS * h, 1e-2, _STD_POS * h, _STD_VEL * h, _STD_VEL * h, 1e-5, _STD_VEL * h]
        self.mean = _F @ self.mean
        self.cov = _F @ self.cov @ _F.T + np.diag(np.square(std))

    def update(self, box, score, cls, frame):
        h = self.mean[3]
        r = np.diag(np.square([_STD_POS * h, _STD_POS * h, 1e-1, _STD_POS * h]))
        s = _H @ self.cov @ _H.T + r
        k = np.linalg.solve(s, (self.cov @ _H.T).T).T
        self.mean = self.mean + k @ (_to_xyah(box) - _H @ self.mean)
        self.cov = self.cov - k @ s @ k.T
        self.score, self.cls, self.last = score, cls, frame
        self.hits += 1

    def box(self):
        return _to_xyxy(self.mean[:4])


def _iou(a, b):
    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)))
    a, b = np.asarray(a), np.asarray(b)
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])
    return inter / (area(a)[:, None] + area(b)[None, :] - inter + 1e-9)


def _assign(sim, threshold):
    """Pairs (row, col) with sim > threshold maximising the total; the rows and columns left."""
    if sim.size == 0:
        return [], list(range(sim.shape[0])), list(range(sim.shape[1]))
    if linear_sum_assignment is not None:
        cost = np.where(sim > threshold, 1.0 - sim, 1e6)
        rows, cols = linear_sum_assignment(cost)
        pairs = [(r, c) for r, c in zip(rows, cols) if sim[r, c] > threshold]
    else:
        pairs, used_r, used_c = [], set(), set()
        for flat in np.argsort(-sim, axis=None):
            r, c = divmod(int(flat), sim.shape[1])
            if sim[r, c] <= threshold:
                break
            if r not in used_r and c not in used_c:
                pairs.append((r, c))
                used_r.add(r)
                used_c.add(c)
    rs, cs = {p[0] for p in pairs}, {p[1] for p in pairs}
    return pairs, [r for r in range(sim.shape[0]) if r not in rs], [c for c in range(sim.shape[1]) if c not in cs]


class ByteTrack:
    def __init__(self, high=0.5, low=0.1, new=0.6, match_iou=0.2, low_match_iou=0.5, tentative_match_iou=0.3,
                 track_buffer=30, min_hits=2):
        self.high, self.low, self.new = high, low, new
        self.match_iou, self.low_match_iou, self.tentative_match_iou = match_iou, low_match_iou, tentative_match_iou
        self.buffer, self.min_hits = track_buffer, min_hits
        self.tracked, self.lost, self.next_id, self.frame = [], [], 1, 0

    def update(self, dets):
        """dets: [[x1, y1, x2, y2, score, class], ...]. Returns [(box, score, class, track id)] of confirmed tracks
        matched in this frame, and the ids that were lost."""
        self.frame += 1
        dets = np.asarray(dets, dtype=np.float64).reshape(-1, 6)
        hi, lo = dets[dets[:, 4] >= self.high], dets[(dets[:, 4] >= self.low) & (dets[:, 4] < self.high)]
        confirmed = [t for t in self.tracked if t.confirmed]
        tentative = [t for t in self.tracked if not t.confirmed]
        pool = confirmed + self.lost
        for t in pool + tentative:
            t.predict()
        out, kept = [], []

        sim = _iou([t.box() for t in pool], hi[:, :4]) * hi[None, :, 4] if len(hi) else np.zeros((len(pool), 0))
        pairs, left_t, left_d = _assign(sim, self.match_iou)
        for r, c in pairs:
            pool[r].update(hi[c, :4], hi[c, 4], hi[c, 5], self.frame)
            kept.append(pool[r])
        remaining = [pool[r] for r in left_t if pool[r] in confirmed]
        pairs2, left_t2, _ = _assign(_iou([t.box() for t in remaining], lo[:, :4]), self.low_match_iou)
        for r, c in pairs2:
            remaining[r].update(lo[c, :4], lo[c, 4], lo[c, 5], self.frame)
            kept.append(remaining[r])
        newly_lost = [remaining[r] for r in left_t2]
        still_lost = [pool[r] for r in left_t if pool[r] not in confirmed]

        hi_left = hi[left_d]
        pairs3, left_tent, left_d3 = _assign(_iou([t.box() for t in tentative], hi_left[:, :4]), self.tentative_match_iou)
        for r, c in pairs3:
            t = tentative[r]
            t.update(hi_left[c, :4], hi_left[c, 4], hi_left[c, 5], self.frame)
            if t.hits >= self.min_hits:
                t.confirmed, t.id = True, self.next_id
                self.next_id += 1
            kept.append(t)
        for c in left_d3:
            d = hi_left[c]
            if d[4] >= self.new:
                t = _Track(d[:4], d[4], d[5], self.frame)
                if self.min_hits <= 1:
                    t.confirmed, t.id = True, self.next_id
                    self.next_id += 1
                kept.append(t)
        lost_ids = [t.id for t in newly_lost]
        self.lost = [t for t in still_lost + newly_lost if self.frame - t.last <= self.buffer]
        self.tracked = kept
        for t in kept:
            if t.confirmed and t.last == self.frame:
                out.append((t.box(), t.score, int(t.cls), t.id))
        return out, lost_ids
