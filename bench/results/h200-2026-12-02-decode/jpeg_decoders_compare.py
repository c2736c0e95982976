import numpy as np, cv2, torch, torchvision
from torchvision.io import decode_jpeg, read_file
for name, w, h in [("smooth420", 80, 60), ("odd420", 33, 17), ("color444", 64, 48)]:
    ref = np.fromfile(f"tests/data/nvjpeg/{name}.bgr", np.uint8).reshape(h, w, 3).astype(int)
    data = read_file(f"tests/data/nvjpeg/{name}.jpg")
    res = {}
    for dev in ["cuda", "cpu"]:
        img = decode_jpeg(data, device=dev).cpu().numpy().transpose(1, 2, 0)[:, :, ::-1].astype(int)
        res["torchvision-" + dev] = img
    res["opencv"] = cv2.imread(f"tests/data/nvjpeg/{name}.jpg").astype(int)
    for k, img in res.items():
        d = np.abs(img - ref)
        inner = d[:-2, :-2] if (w % 2 or h % 2) else d
        y, x, c = np.unravel_index(np.argmax(inner), inner.shape)
        print(f"{name} {k}: vs ffmpeg max {d.max()} inner max {inner.max()} at ({x},{y}) inner mean {inner.mean():.3f}")
    d = np.abs(res["torchvision-cuda"] - res["opencv"])
    print(f"{name} torchvision-cuda vs opencv: max {d.max()} mean {d.mean():.3f}")
