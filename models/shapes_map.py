"""mAP@0.5 for the shapes detector (NumPy only): VOC/COCO-style all-point interpolated average precision per
class (precision made monotone from the right, summed over every recall step), mean over classes."""

import numpy as np


def _iou(box, boxes):
    iw = np.clip(np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]), 0, None)
    ih = np.clip(np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]), 0, None)
    inter = iw * ih
    union = (box[2] - box[0]) * (box[3] - box[1]) + (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]) - inter
    return inter / np.maximum(union, 1e-9)


def average_precision(dets, gts, classes, iou_thr=0.5):
    """dets: per image (boxes [k, 4] xyxy, scores [k], classes [k]); gts: per image [n, 5] (xyxy, class).
    Returns one AP per class (a class without ground truth gets nan). A detection is a true positive when its
    IoU with a not yet matched ground-truth box of its class is the highest and >= iou_thr (greedy, best score
    first, as VOC and COCO match)."""
    aps = []
    for c in range(classes):
        records, total = [], 0
        for i, ((b, s, k), g) in enumerate(zip(dets, gts)):
            total += int((np.asarray(g)[:, 4] == c).sum()) if len(g) else 0
            for j in np.nonzero(np.asarray(k) == c)[0]:
                records.append((float(s[j]), i, np.asarray(b[j], np.float64)))
        if total == 0:
            aps.append(float("nan"))
            continue
        records.sort(key=lambda r: -r[0])
        used = {}
        tp = np.zeros(len(records))
        for n, (_, i, box) in enumerate(records):
            g = np.asarray(gts[i], np.float64).reshape(-1, 5)
            mine = np.nonzero(g[:, 4] == c)[0]
            if len(mine) == 0:
                continue
            ious = _iou(box, g[mine, :4])
            taken = used.setdefault(i, np.zeros(len(g), bool))
            ious[taken[mine]] = -1
            best = int(np.argmax(ious))
            if ious[best] >= iou_thr:
                tp[n] = 1
                taken[mine[best]] = True
        ctp = np.cumsum(tp)
        recall = ctp / total
        precision = ctp / np.arange(1, len(records) + 1)
        mrec = np.concatenate([[0.0], recall, [1.0]])
        mpre = np.concatenate([[1.0], precision, [0.0]])
        mpre = np.maximum.accumulate(mpre[::-1])[::-1]
        steps = np.nonzero(mrec[1:] != mrec[:-1])[0]
        aps.append(float(np.sum((mrec[steps + 1] - mrec[steps]) * mpre[steps + 1])))
    return aps
