"""ament_python package: the loop's nodes, their ROS-free core and the r2s2r CLI."""
from glob import glob

from setuptools import find_packages, setup

package_name = 'real2sim2real_ros'

# Executables installed to lib/<package> (what `ros2 run` and launch `exec=` find).
NODES = {
    'camera_capture': 'real2sim2real_ros.nodes.camera_capture_node:main',
    'emulated_cell': 'real2sim2real_ros.nodes.emulated_cell_node:main',
    'loop_coordinator': 'real2sim2real_ros.nodes.loop_coordinator.node:main',
    'object_tracker': 'real2sim2real_ros.nodes.object_tracker_node:main',
    'policy_trainer': 'real2sim2real_ros.nodes.policy_trainer.node:main',
    'robot_executor': 'real2sim2real_ros.nodes.robot_executor.node:main',
    'scene_reconstruction': 'real2sim2real_ros.nodes.scene_reconstruction_node:main',
    'sim_server': 'real2sim2real_ros.nodes.sim_server_node:main',
    'system_identification': 'real2sim2real_ros.nodes.system_identification.node:main',
    'r2s2r': 'real2sim2real_ros.cli.main:main',
}

setup(
    name=package_name,
    version='0.1.0',
    packages=find_packages(exclude=['test']),
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + package_name]),
        ('share/' + package_name, ['package.xml']),
        ('share/' + package_name + '/launch', glob('launch/*.launch.xml')),
        ('share/' + package_name + '/config', glob('config/*.yaml')),
        ('share/' + package_name + '/config/cells', glob('config/cells/*.yaml')),
        ('share/' + package_name + '/config/controllers', glob('config/controllers/*.yaml')),
        ('share/' + package_name + '/urdf', glob('urdf/*')),
    ],
    install_requires=['setuptools'],
    zip_safe=False,
    maintainer='real2sim2real maintainers',
    maintainer_email='maintainers@real2sim2real.dev',
    description='Real-to-sim-to-real loop for robot manipulation in ROS 2.',
    license='Apache-2.0',
    entry_points={'console_scripts': [f'{k} = {v}' for k, v in NODES.items()]},
)
