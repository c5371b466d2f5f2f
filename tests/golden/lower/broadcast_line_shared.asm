; fusion/broadcast_line_shared.kernels compiled for the simulated device (device::compile, default config).
; To rewrite: BLESS=1 cargo test -p tilejit-tests lowering_golden

; kernel 0: fused_sub_mul_add_mul_sub_and_3_more (class Flat)
; core function 0: units Kernel, tile 4096, buffers [b0,b1], workspace []
.kernel k_fused_sub_mul_add_mul_sub_and_3_more aiv
.gm b0_2 f32 [] inout
.gm b1_3 f32 [] inout
.arg lo 0
.arg hi 0
.arg s0 0
.arg s1 0
.arg s2 0
.arg s3 0
.arg s4 0
    ldarg r0, 0
    ldarg r1, 1
    ldarg r5, 5
    ldarg r6, 6
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L6:
    bge r0, r1, L53
    sub r2, r1, r0
    min r2, r2, 4096
    waitf mte3, mte2, 0
    add r3, r5, r0
    ld f32, 1x4096, 1, r2, @0x0, b0_2, r3, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    vdup f32, 1x4096, 1, r2, @0x4000, 0.5
    vsub f32, 1x4096, 1, r2, @0x8000, @0x0, @0x4000
    vmul f32, 1x4096, 1, r2, @0x0, @0x8000, @0x4000
    vadd f32, 1x4096, 1, r2, @0x8000, @0x0, @0x4000
    vmul f32, 1x4096, 1, r2, @0x0, @0x8000, @0x4000
    vsub f32, 1x4096, 1, r2, @0x8000, @0x0, @0x4000
    vmul f32, 1x4096, 1, r2, @0x0, @0x8000, @0x4000
    vadd f32, 1x4096, 1, r2, @0x8000, @0x0, @0x4000
    vmul f32, 1x4096, 1, r2, @0x0, @0x8000, @0x4000
    setf v, mte3, 0
    waitf v, mte3, 0
    add r4, r6, r0
    st f32, 1x4096, 1, r2, b1_3, r4, 0, @0x0
    setf mte3, mte2, 0
    add r0, r0, 4096
    bge r0, r1, L53
    sub r2, r1, r0
    min r2, r2, 4096
    waitf mte3, mte2, 1
    add r3, r5, r0
    ld f32, 1x4096, 1, r2, @0xc0a0, b0_2, r3, 0
    setf mte2, v, 1
    waitf mte2, v, 1
    vdup f32, 1x4096, 1, r2, @0x100a0, 0.5
    vsub f32, 1x4096, 1, r2, @0x140a0, @0xc0a0, @0x100a0
    vmul f32, 1x4096, 1, r2, @0xc0a0, @0x140a0, @0x100a0
    vadd f32, 1x4096, 1, r2, @0x140a0, @0xc0a0, @0x100a0
    vmul f32, 1x4096, 1, r2, @0xc0a0, @0x140a0, @0x100a0
    vsub f32, 1x4096, 1, r2, @0x140a0, @0xc0a0, @0x100a0
    vmul f32, 1x4096, 1, r2, @0xc0a0, @0x140a0, @0x100a0
    vadd f32, 1x4096, 1, r2, @0x140a0, @0xc0a0, @0x100a0
    vmul f32, 1x4096, 1, r2, @0xc0a0, @0x140a0, @0x100a0
    setf v, mte3, 1
    waitf v, mte3, 1
    add r4, r6, r0
    st f32, 1x4096, 1, r2, b1_3, r4, 0, @0xc0a0
    setf mte3, mte2, 1
    add r0, r0, 4096
    jmp L6
L53:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end

; kernel 1: fused_gt_select (class Rows { double: true })
; core function 0: units Kernel, tile 1, buffers [b0,b1,b2,b3], workspace []
.kernel k_fused_gt_select aiv
.gm b0_3 f32 [] inout
.gm b1_0 f32 [] inout
.gm b2_1 f32 [] inout
.gm b3_4 f32 [] inout
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
    ldarg r0, 0
    ldarg r1, 1
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L4:
    bge r0, r1, L107
    ldarg r2, 4
    max r27, r2, 1
    ldarg r5, 17
    ldarg r6, 18
    ldarg r7, 19
    ldarg r8, 20
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
    waitf mte3, mte2, 0
    ld f32, 1x1, 1, 1, @0x17f20, b0_3, r5, 0
    ld f32, 1x4904, 1, r2, @0x4ca0, b1_0, r6, 0
    ld f32, 1x4904, 1, r2, @0x9940, b2_1, r7, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    vbcast f32, 1x4904, 1, r2, @0x0, @0x17f20
    vdup f32, 1x4904, 1, r27, @0xe5e0, 0.5
    vcmp f32, 1x4904, 1, r27, gt, @0x13280, @0x0, @0xe5e0
    vsel f32, 1x4904, 1, r27, @0xe5e0, @0x13280, @0x4ca0, @0x9940
    setf v, mte3, 0
    waitf v, mte3, 0
    st f32, 1x4904, 1, r2, b3_4, r8, 0, @0xe5e0
    setf mte3, mte2, 0
    add r0, r0, 1
    bge r0, r1, L107
    ldarg r2, 4
    max r27, r2, 1
    ldarg r5, 17
    ldarg r6, 18
    ldarg r7, 19
    ldarg r8, 20
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
    waitf mte3, mte2, 1
    ld f32, 1x1, 1, 1, @0x2ff20, b0_3, r5, 0
    ld f32, 1x4904, 1, r2, @0x1cca0, b1_0, r6, 0
    ld f32, 1x4904, 1, r2, @0x21940, b2_1, r7, 0
    setf mte2, v, 1
    waitf mte2, v, 1
    vbcast f32, 1x4904, 1, r2, @0x18000, @0x2ff20
    vdup f32, 1x4904, 1, r27, @0x265e0, 0.5
    vcmp f32, 1x4904, 1, r27, gt, @0x2b280, @0x18000, @0x265e0
    vsel f32, 1x4904, 1, r27, @0x265e0, @0x2b280, @0x1cca0, @0x21940
    setf v, mte3, 1
    waitf v, mte3, 1
    st f32, 1x4904, 1, r2, b3_4, r8, 0, @0x265e0
    setf mte3, mte2, 1
    add r0, r0, 1
    jmp L4
L107:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end

; kernel 2: fused_gt_select (class Rows { double: true })
; core function 0: units Kernel, tile 1, buffers [b0,b1,b2,b3], workspace []
.kernel k_fused_gt_select aiv
.gm b0_3 f32 [] inout
.gm b1_1 f32 [] inout
.gm b2_0 f32 [] inout
.gm b3_5 f32 [] inout
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
    ldarg r0, 0
    ldarg r1, 1
    setf mte3, mte2, 0
    setf mte3, mte2, 1
L4:
    bge r0, r1, L107
    ldarg r2, 4
    max r27, r2, 1
    ldarg r5, 17
    ldarg r6, 18
    ldarg r7, 19
    ldarg r8, 20
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
    waitf mte3, mte2, 0
    ld f32, 1x1, 1, 1, @0x17f20, b0_3, r5, 0
    ld f32, 1x4904, 1, r2, @0x4ca0, b1_1, r6, 0
    ld f32, 1x4904, 1, r2, @0x9940, b2_0, r7, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    vbcast f32, 1x4904, 1, r2, @0x0, @0x17f20
    vdup f32, 1x4904, 1, r27, @0xe5e0, 0.5
    vcmp f32, 1x4904, 1, r27, gt, @0x13280, @0x0, @0xe5e0
    vsel f32, 1x4904, 1, r27, @0xe5e0, @0x13280, @0x4ca0, @0x9940
    setf v, mte3, 0
    waitf v, mte3, 0
    st f32, 1x4904, 1, r2, b3_5, r8, 0, @0xe5e0
    setf mte3, mte2, 0
    add r0, r0, 1
    bge r0, r1, L107
    ldarg r2, 4
    max r27, r2, 1
    ldarg r5, 17
    ldarg r6, 18
    ldarg r7, 19
    ldarg r8, 20
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
    waitf mte3, mte2, 1
    ld f32, 1x1, 1, 1, @0x2ff20, b0_3, r5, 0
    ld f32, 1x4904, 1, r2, @0x1cca0, b1_1, r6, 0
    ld f32, 1x4904, 1, r2, @0x21940, b2_0, r7, 0
    setf mte2, v, 1
    waitf mte2, v, 1
    vbcast f32, 1x4904, 1, r2, @0x18000, @0x2ff20
    vdup f32, 1x4904, 1, r27, @0x265e0, 0.5
    vcmp f32, 1x4904, 1, r27, gt, @0x2b280, @0x18000, @0x265e0
    vsel f32, 1x4904, 1, r27, @0x265e0, @0x2b280, @0x1cca0, @0x21940
    setf v, mte3, 1
    waitf v, mte3, 1
    st f32, 1x4904, 1, r2, b3_5, r8, 0, @0x265e0
    setf mte3, mte2, 1
    add r0, r0, 1
    jmp L4
L107:
    waitf mte3, mte2, 0
    waitf mte3, mte2, 1
    end
