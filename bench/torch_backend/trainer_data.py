# SPDX-License-Identifier: Apache-2.0
"""How the trainers (examples/mini_trainer, examples/torch_trainer) feed their data, in
plain Python (no torch): the pixels' scaling and the samples' order. Shared by
bench_models.py and bench/framework_compare/tf_mwms_train.py, so that the peers train what
the trainers train."""

M64 = (1 << 64) - 1


def normalised(pixels):
    """(pixel - 64) / 128 of float pixels (a torch tensor or a numpy array), exact in
    float: mini_trainer's gather_batch, which torch_trainer uses too."""
    return (pixels - 64) / 128


class TrainerOrder:
    """examples/mini_trainer/rng.hpp (xoshiro256** seeded by splitmix64, Lemire's bounded
    draw, Fisher-Yates) in Python: the same permutation of the training samples each epoch
    as torch_trainer and mini_trainer, so every system sees the same batches."""

    def __init__(self, seed):
        x, self.s = seed, []
        for _ in range(4):
            x = (x + 0x9E3779B97F4A7C15) & M64
            z = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
            self.s.append(z ^ (z >> 31))

    @staticmethod
    def _rotl(x, k):
        return ((x << k) | (x >> (64 - k))) & M64

    def next(self):
        s = self.s
        result = (self._rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = self._rotl(s[3], 45)
        return result

    def below(self, bound):
        while True:
            m = self.next() * bound
            low = m & M64
            if low >= bound or low >= ((1 << 64) - bound) % bound:
                return m >> 64

    def permutation(self, n):
        p = list(range(n))
        for i in range(n, 1, -1):
            j = self.below(i)
            p[i - 1], p[j] = p[j], p[i - 1]
        return p
