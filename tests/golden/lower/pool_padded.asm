; fusion/pool_padded.kernels compiled for the simulated device (device::compile, default config).
; To rewrite: BLESS=1 cargo test -p tilejit-tests lowering_golden

; kernel 0: pool_max (class Flat)
; core function 0: units Kernel, tile 4096, buffers [b0,b1], workspace []
.kernel k_pool_max aiv
.gm b0_0 f32 [] inout
.gm b1_1 f32 [] inout
.arg lo 0
.arg hi 0
.arg s0 0
.arg s1 0
.arg s2 0
.arg s3 0
.arg s4 0
.arg s5 0
.arg s6 0
.arg s7 0
.arg s8 0
.arg s9 0
.arg s10 0
    ldarg r0, 0
    ldarg r1, 1
    ldarg r5, 8
    ldarg r6, 9
    ldarg r7, 10
    ldarg r8, 11
    ldarg r9, 12
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L9:
    bge r0, r1, L86
    sub r2, r1, r0
    min r2, r2, 4096
    waitf mte3, mte2, 0
    ldarg r3, 3
    mul r3, r0, r3
    add r3, r3, r5
    ldarg r31, 3
    ldx f32, 1x4096, 1, r2, @0x0, b0_0, r3, 0, r31
    ldarg r3, 4
    mul r3, r0, r3
    add r3, r3, r6
    ldarg r31, 4
    ldx f32, 1x4096, 1, r2, @0x4000, b0_0, r3, 0, r31
    ldarg r3, 5
    mul r3, r0, r3
    add r3, r3, r7
    ldarg r31, 5
    ldx f32, 1x4096, 1, r2, @0x8000, b0_0, r3, 0, r31
    ldarg r3, 6
    mul r3, r0, r3
    add r3, r3, r8
    ldarg r31, 6
    ldx f32, 1x4096, 1, r2, @0xc000, b0_0, r3, 0, r31
    setf mte2, v, 0
    waitf mte2, v, 0
    vmax f32, 1x4096, 1, r2, @0x10000, @0x0, @0x4000
    vmax f32, 1x4096, 1, r2, @0x4000, @0x10000, @0x8000
    vmax f32, 1x4096, 1, r2, @0x10000, @0x4000, @0xc000
    setf v, mte3, 0
    waitf v, mte3, 0
    ldarg r4, 7
    mul r4, r0, r4
    add r4, r4, r9
    ldarg r31, 7
    stx f32, 1x4096, 1, r2, b1_1, r4, 0, r31, @0x10000
    setf mte3, mte2, 0
    add r0, r0, 4096
    bge r0, r1, L86
    sub r2, r1, r0
    min r2, r2, 4096
    waitf mte3, mte2, 1
    ldarg r3, 3
    mul r3, r0, r3
    add r3, r3, r5
    ldarg r31, 3
    ldx f32, 1x4096, 1, r2, @0x14100, b0_0, r3, 0, r31
    ldarg r3, 4
    mul r3, r0, r3
    add r3, r3, r6
    ldarg r31, 4
    ldx f32, 1x4096, 1, r2, @0x18100, b0_0, r3, 0, r31
    ldarg r3, 5
    mul r3, r0, r3
    add r3, r3, r7
    ldarg r31, 5
    ldx f32, 1x4096, 1, r2, @0x1c100, b0_0, r3, 0, r31
    ldarg r3, 6
    mul r3, r0, r3
    add r3, r3, r8
    ldarg r31, 6
    ldx f32, 1x4096, 1, r2, @0x20100, b0_0, r3, 0, r31
    setf mte2, v, 1
    waitf mte2, v, 1
    vmax f32, 1x4096, 1, r2, @0x24100, @0x14100, @0x18100
    vmax f32, 1x4096, 1, r2, @0x18100, @0x24100, @0x1c100
    vmax f32, 1x4096, 1, r2, @0x24100, @0x18100, @0x20100
    setf v, mte3, 1
    waitf v, mte3, 1
    ldarg r4, 7
    mul r4, r0, r4
    add r4, r4, r9
    ldarg r31, 7
    stx f32, 1x4096, 1, r2, b1_1, r4, 0, r31, @0x24100
    setf mte3, mte2, 1
    add r0, r0, 4096
    jmp L9
L86:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end

; kernel 1: pool_max (class Rows { double: true })
; core function 0: units Kernel, tile 1, buffers [b0,b1], workspace []
.kernel k_pool_max aiv
.gm b0_0 f32 [] inout
.gm b1_1 f32 [] inout
.arg lo 0
.arg hi 0
.arg s0 0
.arg s1 0
.arg s2 0
.arg s3 0
.arg s4 0
.arg s5 0
.arg s6 0
.arg s7 0
.arg s8 0
.arg s9 0
.arg s10 0
.arg s11 0
.arg s12 0
.arg s13 0
.arg s14 0
.arg s15 0
.arg s16 0
.arg s17 0
.arg s18 0
.arg s19 0
.arg s20 0
.arg s21 0
.arg s22 0
    ldarg r0, 0
    ldarg r1, 1
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L4:
    bge r0, r1, L119
    ldarg r2, 3
    max r27, r2, 1
    ldarg r5, 18
    ldarg r6, 19
    ldarg r7, 20
    ldarg r8, 21
    ldarg r9, 22
    ldarg r10, 23
    ldarg r11, 24
    mov r3, r0
    ldarg r31, 4
    mul r31, r3, r31
    add r5, r5, r31
    ldarg r31, 6
    mul r31, r3, r31
    add r6, r6, r31
    ldarg r31, 8
    mul r31, r3, r31
    add r7, r7, r31
    ldarg r31, 10
    mul r31, r3, r31
    add r8, r8, r31
    ldarg r31, 12
    mul r31, r3, r31
    add r9, r9, r31
    ldarg r31, 14
    mul r31, r3, r31
    add r10, r10, r31
    ldarg r31, 16
    mul r31, r3, r31
    add r11, r11, r31
    waitf mte3, mte2, 0
    ldarg r31, 5
    ldx f32, 1x3496, 1, r2, @0x0, b0_0, r5, 0, r31
    ldarg r31, 7
    ldx f32, 1x3496, 1, r2, @0x36a0, b0_0, r6, 0, r31
    ldarg r31, 9
    ldx f32, 1x3496, 1, r2, @0x6d40, b0_0, r7, 0, r31
    ldarg r31, 11
    ldx f32, 1x3496, 1, r2, @0xa3e0, b0_0, r8, 0, r31
    ldarg r31, 13
    ldx f32, 1x3496, 1, r2, @0xda80, b0_0, r9, 0, r31
    ldarg r31, 15
    ldx f32, 1x3496, 1, r2, @0x11120, b0_0, r10, 0, r31
    setf mte2, v, 0
    waitf mte2, v, 0
    vmax f32, 1x3496, 1, r27, @0x147c0, @0x0, @0x36a0
    vmax f32, 1x3496, 1, r27, @0x36a0, @0x147c0, @0x6d40
    vmax f32, 1x3496, 1, r27, @0x147c0, @0x36a0, @0xa3e0
    vmax f32, 1x3496, 1, r27, @0x36a0, @0x147c0, @0xda80
    vmax f32, 1x3496, 1, r27, @0x147c0, @0x36a0, @0x11120
    setf v, mte3, 0
    waitf v, mte3, 0
    st f32, 1x3496, 1, r2, b1_1, r11, 0, @0x147c0
    setf mte3, mte2, 0
    add r0, r0, 1
    bge r0, r1, L119
    ldarg r2, 3
    max r27, r2, 1
    ldarg r5, 18
    ldarg r6, 19
    ldarg r7, 20
    ldarg r8, 21
    ldarg r9, 22
    ldarg r10, 23
    ldarg r11, 24
    mov r3, r0
    ldarg r31, 4
    mul r31, r3, r31
    add r5, r5, r31
    ldarg r31, 6
    mul r31, r3, r31
    add r6, r6, r31
    ldarg r31, 8
    mul r31, r3, r31
    add r7, r7, r31
    ldarg r31, 10
    mul r31, r3, r31
    add r8, r8, r31
    ldarg r31, 12
    mul r31, r3, r31
    add r9, r9, r31
    ldarg r31, 14
    mul r31, r3, r31
    add r10, r10, r31
    ldarg r31, 16
    mul r31, r3, r31
    add r11, r11, r31
    waitf mte3, mte2, 1
    ldarg r31, 5
    ldx f32, 1x3496, 1, r2, @0x17fa0, b0_0, r5, 0, r31
    ldarg r31, 7
    ldx f32, 1x3496, 1, r2, @0x1b640, b0_0, r6, 0, r31
    ldarg r31, 9
    ldx f32, 1x3496, 1, r2, @0x1ece0, b0_0, r7, 0, r31
    ldarg r31, 11
    ldx f32, 1x3496, 1, r2, @0x22380, b0_0, r8, 0, r31
    ldarg r31, 13
    ldx f32, 1x3496, 1, r2, @0x25a20, b0_0, r9, 0, r31
    ldarg r31, 15
    ldx f32, 1x3496, 1, r2, @0x290c0, b0_0, r10, 0, r31
    setf mte2, v, 1
    waitf mte2, v, 1
    vmax f32, 1x3496, 1, r27, @0x2c760, @0x17fa0, @0x1b640
    vmax f32, 1x3496, 1, r27, @0x1b640, @0x2c760, @0x1ece0
    vmax f32, 1x3496, 1, r27, @0x2c760, @0x1b640, @0x22380
    vmax f32, 1x3496, 1, r27, @0x1b640, @0x2c760, @0x25a20
    vmax f32, 1x3496, 1, r27, @0x2c760, @0x1b640, @0x290c0
    setf v, mte3, 1
    waitf v, mte3, 1
    st f32, 1x3496, 1, r2, b1_1, r11, 0, @0x2c760
    setf mte3, mte2, 1
    add r0, r0, 1
    jmp L4
L119:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end

; kernel 2: pool_max (class Rows { double: true })
; core function 0: units Kernel, tile 1, buffers [b0,b1], workspace []
.kernel k_pool_max aiv
.gm b0_0 f32 [] inout
.gm b1_1 f32 [] inout
.arg lo 0
.arg hi 0
.arg s0 0
.arg s1 0
.arg s2 0
.arg s3 0
.arg s4 0
.arg s5 0
.arg s6 0
.arg s7 0
.arg s8 0
.arg s9 0
.arg s10 0
.arg s11 0
.arg s12 0
.arg s13 0
.arg s14 0
.arg s15 0
.arg s16 0
.arg s17 0
.arg s18 0
.arg s19 0
.arg s20 0
.arg s21 0
.arg s22 0
    ldarg r0, 0
    ldarg r1, 1
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L4:
    bge r0, r1, L121
    ldarg r2, 3
    max r27, r2, 1
    ldarg r5, 18
    ldarg r6, 19
    ldarg r7, 20
    ldarg r8, 21
    ldarg r9, 22
    ldarg r10, 23
    ldarg r11, 24
    mov r3, r0
    ldarg r31, 4
    mul r31, r3, r31
    add r5, r5, r31
    ldarg r31, 6
    mul r31, r3, r31
    add r6, r6, r31
    ldarg r31, 8
    mul r31, r3, r31
    add r7, r7, r31
    ldarg r31, 10
    mul r31, r3, r31
    add r8, r8, r31
    ldarg r31, 12
    mul r31, r3, r31
    add r9, r9, r31
    ldarg r31, 14
    mul r31, r3, r31
    add r10, r10, r31
    ldarg r31, 16
    mul r31, r3, r31
    add r11, r11, r31
    waitf mte3, mte2, 0
    ldarg r31, 5
    ldx f32, 1x3496, 1, r2, @0x0, b0_0, r5, 0, r31
    ldarg r31, 7
    ldx f32, 1x3496, 1, r2, @0x36a0, b0_0, r6, 0, r31
    ldarg r31, 9
    ldx f32, 1x3496, 1, r2, @0x6d40, b0_0, r7, 0, r31
    ldarg r31, 11
    ldx f32, 1x3496, 1, r2, @0xa3e0, b0_0, r8, 0, r31
    ldarg r31, 13
    ldx f32, 1x3496, 1, r2, @0xda80, b0_0, r9, 0, r31
    ldarg r31, 15
    ldx f32, 1x3496, 1, r2, @0x11120, b0_0, r10, 0, r31
    setf mte2, v, 0
    waitf mte2, v, 0
    vmax f32, 1x3496, 1, r27, @0x147c0, @0x0, @0x36a0
    vmax f32, 1x3496, 1, r27, @0x36a0, @0x147c0, @0x6d40
    vmax f32, 1x3496, 1, r27, @0x147c0, @0x36a0, @0xa3e0
    vmax f32, 1x3496, 1, r27, @0x36a0, @0x147c0, @0xda80
    vmax f32, 1x3496, 1, r27, @0x147c0, @0x36a0, @0x11120
    setf v, mte3, 0
    waitf v, mte3, 0
    ldarg r31, 17
    stx f32, 1x3496, 1, r2, b1_1, r11, 0, r31, @0x147c0
    setf mte3, mte2, 0
    add r0, r0, 1
    bge r0, r1, L121
    ldarg r2, 3
    max r27, r2, 1
    ldarg r5, 18
    ldarg r6, 19
    ldarg r7, 20
    ldarg r8, 21
    ldarg r9, 22
    ldarg r10, 23
    ldarg r11, 24
    mov r3, r0
    ldarg r31, 4
    mul r31, r3, r31
    add r5, r5, r31
    ldarg r31, 6
    mul r31, r3, r31
    add r6, r6, r31
    ldarg r31, 8
    mul r31, r3, r31
    add r7, r7, r31
    ldarg r31, 10
    mul r31, r3, r31
    add r8, r8, r31
    ldarg r31, 12
    mul r31, r3, r31
    add r9, r9, r31
    ldarg r31, 14
    mul r31, r3, r31
    add r10, r10, r31
    ldarg r31, 16
    mul r31, r3, r31
    add r11, r11, r31
    waitf mte3, mte2, 1
    ldarg r31, 5
    ldx f32, 1x3496, 1, r2, @0x17fa0, b0_0, r5, 0, r31
    ldarg r31, 7
    ldx f32, 1x3496, 1, r2, @0x1b640, b0_0, r6, 0, r31
    ldarg r31, 9
    ldx f32, 1x3496, 1, r2, @0x1ece0, b0_0, r7, 0, r31
    ldarg r31, 11
    ldx f32, 1x3496, 1, r2, @0x22380, b0_0, r8, 0, r31
    ldarg r31, 13
    ldx f32, 1x3496, 1, r2, @0x25a20, b0_0, r9, 0, r31
    ldarg r31, 15
    ldx f32, 1x3496, 1, r2, @0x290c0, b0_0, r10, 0, r31
    setf mte2, v, 1
    waitf mte2, v, 1
    vmax f32, 1x3496, 1, r27, @0x2c760, @0x17fa0, @0x1b640
    vmax f32, 1x3496, 1, r27, @0x1b640, @0x2c760, @0x1ece0
    vmax f32, 1x3496, 1, r27, @0x2c760, @0x1b640, @0x22380
    vmax f32, 1x3496, 1, r27, @0x1b640, @0x2c760, @0x25a20
    vmax f32, 1x3496, 1, r27, @0x2c760, @0x1b640, @0x290c0
    setf v, mte3, 1
    waitf v, mte3, 1
    ldarg r31, 17
    stx f32, 1x3496, 1, r2, b1_1, r11, 0, r31, @0x2c760
    setf mte3, mte2, 1
    add r0, r0, 1
    jmp L4
L121:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end

; kernel 3: pool_max (class Rows { double: true })
; core function 0: units Kernel, tile 1, buffers [b0,b1], workspace []
.kernel k_pool_max aiv
.gm b0_0 f32 [] inout
.gm b1_1 f32 [] inout
.arg lo 0
.arg hi 0
.arg s0 0
.arg s1 0
.arg s2 0
.arg s3 0
.arg s4 0
.arg s5 0
.arg s6 0
.arg s7 0
.arg s8 0
.arg s9 0
.arg s10 0
.arg s11 0
.arg s12 0
.arg s13 0
.arg s14 0
.arg s15 0
.arg s16 0
.arg s17 0
.arg s18 0
.arg s19 0
.arg s20 0
.arg s21 0
.arg s22 0
.arg s23 0
.arg s24 0
.arg s25 0
.arg s26 0
.arg s27 0
.arg s28 0
.arg s29 0
.arg s30 0
.arg s31 0
.arg s32 0
.arg s33 0
.arg s34 0
.arg s35 0
.arg s36 0
.arg s37 0
.arg s38 0
.arg s39 0
.arg s40 0
.arg s41 0
.arg s42 0
    ldarg r0, 0
    ldarg r1, 1
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L4:
    bge r0, r1, L229
    ldarg r2, 4
    max r27, r2, 1
    ldarg r5, 35
    ldarg r6, 36
    ldarg r7, 37
    ldarg r8, 38
    ldarg r9, 39
    ldarg r10, 40
    ldarg r11, 41
    ldarg r12, 42
    ldarg r13, 43
    ldarg r14, 44
    mov r3, r0
    ldarg r31, 3
    max r31, r31, 1
    rem r4, r3, r31
    div r3, r3, r31
    ldarg r31, 6
    mul r31, r4, r31
    add r5, r5, r31
    ldarg r31, 9
    mul r31, r4, r31
    add r6, r6, r31
    ldarg r31, 12
    mul r31, r4, r31
    add r7, r7, r31
    ldarg r31, 15
    mul r31, r4, r31
    add r8, r8, r31
    ldarg r31, 18
    mul r31, r4, r31
    add r9, r9, r31
    ldarg r31, 21
    mul r31, r4, r31
    add r10, r10, r31
    ldarg r31, 24
    mul r31, r4, r31
    add r11, r11, r31
    ldarg r31, 27
    mul r31, r4, r31
    add r12, r12, r31
    ldarg r31, 30
    mul r31, r4, r31
    add r13, r13, r31
    ldarg r31, 33
    mul r31, r4, r31
    add r14, r14, r31
    ldarg r31, 5
    mul r31, r3, r31
    add r5, r5, r31
    ldarg r31, 8
    mul r31, r3, r31
    add r6, r6, r31
    ldarg r31, 11
    mul r31, r3, r31
    add r7, r7, r31
    ldarg r31, 14
    mul r31, r3, r31
    add r8, r8, r31
    ldarg r31, 17
    mul r31, r3, r31
    add r9, r9, r31
    ldarg r31, 20
    mul r31, r3, r31
    add r10, r10, r31
    ldarg r31, 23
    mul r31, r3, r31
    add r11, r11, r31
    ldarg r31, 26
    mul r31, r3, r31
    add r12, r12, r31
    ldarg r31, 29
    mul r31, r3, r31
    add r13, r13, r31
    ldarg r31, 32
    mul r31, r3, r31
    add r14, r14, r31
    waitf mte3, mte2, 0
    ldarg r31, 7
    ldx f32, 1x2440, 1, r2, @0x0, b0_0, r5, 0, r31
    ldarg r31, 10
    ldx f32, 1x2440, 1, r2, @0x2620, b0_0, r6, 0, r31
    ldarg r31, 13
    ldx f32, 1x2440, 1, r2, @0x4c40, b0_0, r7, 0, r31
    ldarg r31, 16
    ldx f32, 1x2440, 1, r2, @0x7260, b0_0, r8, 0, r31
    ldarg r31, 19
    ldx f32, 1x2440, 1, r2, @0x9880, b0_0, r9, 0, r31
    ldarg r31, 22
    ldx f32, 1x2440, 1, r2, @0xbea0, b0_0, r10, 0, r31
    ldarg r31, 25
    ldx f32, 1x2440, 1, r2, @0xe4c0, b0_0, r11, 0, r31
    ldarg r31, 28
    ldx f32, 1x2440, 1, r2, @0x10ae0, b0_0, r12, 0, r31
    ldarg r31, 31
    ldx f32, 1x2440, 1, r2, @0x13100, b0_0, r13, 0, r31
    setf mte2, v, 0
    waitf mte2, v, 0
    vmax f32, 1x2440, 1, r27, @0x15720, @0x0, @0x2620
    vmax f32, 1x2440, 1, r27, @0x2620, @0x15720, @0x4c40
    vmax f32, 1x2440, 1, r27, @0x15720, @0x2620, @0x7260
    vmax f32, 1x2440, 1, r27, @0x2620, @0x15720, @0x9880
    vmax f32, 1x2440, 1, r27, @0x15720, @0x2620, @0xbea0
    vmax f32, 1x2440, 1, r27, @0x2620, @0x15720, @0xe4c0
    vmax f32, 1x2440, 1, r27, @0x15720, @0x2620, @0x10ae0
    vmax f32, 1x2440, 1, r27, @0x2620, @0x15720, @0x13100
    setf v, mte3, 0
    waitf v, mte3, 0
    st f32, 1x2440, 1, r2, b1_1, r14, 0, @0x2620
    setf mte3, mte2, 0
    add r0, r0, 1
    bge r0, r1, L229
    ldarg r2, 4
    max r27, r2, 1
    ldarg r5, 35
    ldarg r6, 36
    ldarg r7, 37
    ldarg r8, 38
    ldarg r9, 39
    ldarg r10, 40
    ldarg r11, 41
    ldarg r12, 42
    ldarg r13, 43
    ldarg r14, 44
    mov r3, r0
    ldarg r31, 3
    max r31, r31, 1
    rem r4, r3, r31
    div r3, r3, r31
    ldarg r31, 6
    mul r31, r4, r31
    add r5, r5, r31
    ldarg r31, 9
    mul r31, r4, r31
    add r6, r6, r31
    ldarg r31, 12
    mul r31, r4, r31
    add r7, r7, r31
    ldarg r31, 15
    mul r31, r4, r31
    add r8, r8, r31
    ldarg r31, 18
    mul r31, r4, r31
    add r9, r9, r31
    ldarg r31, 21
    mul r31, r4, r31
    add r10, r10, r31
    ldarg r31, 24
    mul r31, r4, r31
    add r11, r11, r31
    ldarg r31, 27
    mul r31, r4, r31
    add r12, r12, r31
    ldarg r31, 30
    mul r31, r4, r31
    add r13, r13, r31
    ldarg r31, 33
    mul r31, r4, r31
    add r14, r14, r31
    ldarg r31, 5
    mul r31, r3, r31
    add r5, r5, r31
    ldarg r31, 8
    mul r31, r3, r31
    add r6, r6, r31
    ldarg r31, 11
    mul r31, r3, r31
    add r7, r7, r31
    ldarg r31, 14
    mul r31, r3, r31
    add r8, r8, r31
    ldarg r31, 17
    mul r31, r3, r31
    add r9, r9, r31
    ldarg r31, 20
    mul r31, r3, r31
    add r10, r10, r31
    ldarg r31, 23
    mul r31, r3, r31
    add r11, r11, r31
    ldarg r31, 26
    mul r31, r3, r31
    add r12, r12, r31
    ldarg r31, 29
    mul r31, r3, r31
    add r13, r13, r31
    ldarg r31, 32
    mul r31, r3, r31
    add r14, r14, r31
    waitf mte3, mte2, 1
    ldarg r31, 7
    ldx f32, 1x2440, 1, r2, @0x17ee0, b0_0, r5, 0, r31
    ldarg r31, 10
    ldx f32, 1x2440, 1, r2, @0x1a500, b0_0, r6, 0, r31
    ldarg r31, 13
    ldx f32, 1x2440, 1, r2, @0x1cb20, b0_0, r7, 0, r31
    ldarg r31, 16
    ldx f32, 1x2440, 1, r2, @0x1f140, b0_0, r8, 0, r31
    ldarg r31, 19
    ldx f32, 1x2440, 1, r2, @0x21760, b0_0, r9, 0, r31
    ldarg r31, 22
    ldx f32, 1x2440, 1, r2, @0x23d80, b0_0, r10, 0, r31
    ldarg r31, 25
    ldx f32, 1x2440, 1, r2, @0x263a0, b0_0, r11, 0, r31
    ldarg r31, 28
    ldx f32, 1x2440, 1, r2, @0x289c0, b0_0, r12, 0, r31
    ldarg r31, 31
    ldx f32, 1x2440, 1, r2, @0x2afe0, b0_0, r13, 0, r31
    setf mte2, v, 1
    waitf mte2, v, 1
    vmax f32, 1x2440, 1, r27, @0x2d600, @0x17ee0, @0x1a500
    vmax f32, 1x2440, 1, r27, @0x1a500, @0x2d600, @0x1cb20
    vmax f32, 1x2440, 1, r27, @0x2d600, @0x1a500, @0x1f140
    vmax f32, 1x2440, 1, r27, @0x1a500, @0x2d600, @0x21760
    vmax f32, 1x2440, 1, r27, @0x2d600, @0x1a500, @0x23d80
    vmax f32, 1x2440, 1, r27, @0x1a500, @0x2d600, @0x263a0
    vmax f32, 1x2440, 1, r27, @0x2d600, @0x1a500, @0x289c0
    vmax f32, 1x2440, 1, r27, @0x1a500, @0x2d600, @0x2afe0
    setf v, mte3, 1
    waitf v, mte3, 1
    st f32, 1x2440, 1, r2, b1_1, r14, 0, @0x1a500
    setf mte3, mte2, 1
    add r0, r0, 1
    jmp L4
L229:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end
