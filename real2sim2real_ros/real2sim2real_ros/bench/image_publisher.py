"""A publisher process for the image-transport benchmark: 640x480 rgb8 + 32FC1 depth at a
fixed rate with a named QoS profile, like a camera driver (stamps = publish time)."""
from __future__ import annotations

import argparse
import time

import numpy as np
import rclpy
from sensor_msgs.msg import Image

from real2sim2real_ros.ros import qos


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument('--rate', type=float, default=30.0)
    ap.add_argument('--seconds', type=float, default=8.0)
    ap.add_argument('--qos', default='images')
    ap.add_argument('--width', type=int, default=640)
    ap.add_argument('--height', type=int, default=480)
    ap.add_argument('--warmup', type=float, default=2.0)
    args = ap.parse_args(argv)
    rclpy.init()
    node = rclpy.create_node('bench_image_publisher')
    try:
        profile = qos.by_name(args.qos)
        pub_rgb = node.create_publisher(Image, 'camera/color/image_raw', profile)
        pub_depth = node.create_publisher(Image, 'camera/depth/image_rect_raw', profile)
        w, h = args.width, args.height
        rgb = np.random.default_rng(0).integers(0, 255, (h, w, 3), dtype=np.uint8).tobytes()
        depth = np.full((h, w), 1.0, np.float32).tobytes()
        deadline = time.monotonic() + args.warmup
        while time.monotonic() < deadline and pub_rgb.get_subscription_count() == 0:
            time.sleep(0.05)
        time.sleep(0.5)
        period = 1.0 / args.rate
        n = int(args.seconds * args.rate)
        t_next = time.monotonic()
        for i in range(n):
            stamp = node.get_clock().now().to_msg()
            msg = Image(height=h, width=w, encoding='rgb8', step=3 * w, data=rgb)
            msg.header.stamp, msg.header.frame_id = stamp, f'{i}'
            pub_rgb.publish(msg)
            dmsg = Image(height=h, width=w, encoding='32FC1', step=4 * w, data=depth)
            dmsg.header.stamp, dmsg.header.frame_id = stamp, f'{i}'
            pub_depth.publish(dmsg)
            t_next += period
            time.sleep(max(0.0, t_next - time.monotonic()))
        print(f'sent {n}', flush=True)
        time.sleep(1.0)
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
