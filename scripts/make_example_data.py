"""Generate dpselect/data/device_survey.csv.gz, the example data set the package ships.

A synthetic survey: each row says that a user (``user_id``) owns or used a device
(``device_model``, ``os``) in a country (``country``). Users report 1 to ~30 rows, sometimes the
same device twice; device popularity follows a Zipf law over a few thousand models, so the
head is released and the long tail (models owned by a handful of users) is not: the tail is
what differential privacy protects. Nothing here is real data. The package documents and loads
it as ``dpselect.datasets`` "device_survey" (``path``, ``device_survey()``).

    python scripts/make_example_data.py            # writes dpselect/data/device_survey.csv.gz

The output is deterministic (fixed seed; numpy's generator is fine here: this is input data,
not noise). Mechanisms never use it.
"""
from __future__ import annotations

import argparse
import gzip
import io
import os

import numpy as np

BRANDS = {
    "Pixel": ("Google", "Android"), "Galaxy S": ("Samsung", "Android"), "Galaxy A": ("Samsung", "Android"),
    "Galaxy Note": ("Samsung", "Android"), "iPhone": ("Apple", "iOS"), "iPhone Pro": ("Apple", "iOS"),
    "iPad": ("Apple", "iPadOS"), "Redmi Note": ("Xiaomi", "Android"), "Mi": ("Xiaomi", "Android"),
    "OnePlus": ("OnePlus", "Android"), "Moto G": ("Motorola", "Android"), "Xperia": ("Sony", "Android"),
    "Nokia G": ("Nokia", "Android"), "P": ("Huawei", "HarmonyOS"), "Mate": ("Huawei", "HarmonyOS"),
    "Reno": ("Oppo", "Android"), "Find X": ("Oppo", "Android"), "Nord": ("OnePlus", "Android"),
    "ZenFone": ("Asus", "Android"), "ROG Phone": ("Asus", "Android"), "Fairphone": ("Fairphone", "Android"),
    "Surface Duo": ("Microsoft", "Android"), "ThinkPad X": ("Lenovo", "Windows"), "MacBook Air M": ("Apple", "macOS"),
    "Chromebook": ("Acer", "ChromeOS"),
}
COUNTRIES = ["US", "IN", "BR", "DE", "FR", "GB", "JP", "NG", "MX", "ID", "KE", "CA", "IT", "ES", "PL", "NL"]
VARIANTS = ["", " Lite", " Plus", " 5G", " Max", " Mini", " Ultra", " FE", " s", " Neo"]


def make(n_users: int, seed: int) -> bytes:
    gen = np.random.Generator(np.random.PCG64(seed))
    models, oses = [], []
    for series, (brand, os_name) in BRANDS.items():
        for number in range(1, 21):
            for variant in VARIANTS:
                models.append(f"{brand} {series} {number}{variant}")
                oses.append(os_name)
    models_arr, oses_arr = np.array(models), np.array(oses)
    # A Zipf-like popularity over a random order of the models.
    order = gen.permutation(len(models))
    weights = 1.0 / np.arange(1, len(models) + 1) ** 1.15
    weights /= weights.sum()
    per_user = np.minimum(1 + gen.geometric(0.25, n_users), 30)
    users = np.repeat(np.arange(n_users), per_user)
    device = order[gen.choice(len(models), size=users.size, p=weights)]
    home = gen.choice(len(COUNTRIES), size=n_users, p=np.linspace(3, 1, len(COUNTRIES)) / np.linspace(3, 1, len(COUNTRIES)).sum())
    country = home[users]
    user_ids = gen.permutation(900_000)[:n_users] + 100_000  # 6-digit ids, not in order
    shuffle = gen.permutation(users.size)
    out = io.StringIO()
    out.write("user_id,device_model,os,country\n")
    for i in shuffle:
        out.write(f"{user_ids[users[i]]},{models_arr[device[i]]},{oses_arr[device[i]]},{COUNTRIES[country[i]]}\n")
    return out.getvalue().encode()


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=60_000)
    parser.add_argument("--seed", type=int, default=20240603)
    parser.add_argument("--output", default=os.path.normpath(os.path.join(here, "..", "dpselect", "data", "device_survey.csv.gz")))
    args = parser.parse_args()
    data = make(args.users, args.seed)
    # mtime=0: the same bytes on every run
    with open(args.output, "wb") as f, gzip.GzipFile(
        filename="device_survey.csv", mode="wb", fileobj=f, compresslevel=9, mtime=0
    ) as gz:
        gz.write(data)
    rows = data.count(b"\n") - 1
    print(f"wrote {args.output}: {rows} rows, {os.path.getsize(args.output):,} bytes gzipped")


if __name__ == "__main__":
    main()
